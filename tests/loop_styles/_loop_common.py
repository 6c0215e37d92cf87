"""Shared command line, timing and result reporting for the loop-style programs.

Every program in this folder imports this module for the boring parts only:
the common flags, a per-step timer and the final ``LOOP_RESULT`` line.  The
loops themselves, and the profiler around them, are written out in each
program the way one would write them by hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: Steps at the start of a run that ``median_step_ms`` leaves out (warm-up).
WARMUP_STEPS = 3


def base_parser(description: str | None) -> argparse.ArgumentParser:
    """The flags every program takes; programs add their own on top."""
    parser = argparse.ArgumentParser(
        description=(description or "").strip().splitlines()[0] if description else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--iters", type=int, default=20, help="steps of the main loop")
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="torch device to run on",
    )
    parser.add_argument(
        "--trace",
        default=None,
        metavar="PATH",
        help="profile --trace-iters steps from --trace-start and write a Chrome trace here",
    )
    parser.add_argument("--trace-start", type=int, default=5, help="0-based first profiled step")
    parser.add_argument("--trace-iters", type=int, default=5, help="number of profiled steps")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    return parser


def parse_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse and sanity-check the common flags."""
    args = parser.parse_args()
    if args.iters < 1:
        parser.error("--iters must be at least 1")
    if args.trace is not None:
        if args.trace_iters < 1 or args.trace_start < 0:
            parser.error("--trace-iters must be >= 1 and --trace-start >= 0")
        if args.trace_start + args.trace_iters > args.iters:
            parser.error(
                f"--trace-start {args.trace_start} + --trace-iters {args.trace_iters} "
                f"exceeds --iters {args.iters}"
            )
    return args


def resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but CUDA is not available")
    return device


def trace_window(args: argparse.Namespace) -> range:
    """0-based indices of the steps to profile; empty without ``--trace``."""
    if args.trace is None:
        return range(0)
    return range(args.trace_start, args.trace_start + args.trace_iters)


class StepTimer:
    """Times each step.

    On CPU: ``time.perf_counter()`` around the step.  On CUDA: a pair of CUDA
    events recorded on the current stream around the step, read only in
    :meth:`step_ms` after a final ``torch.cuda.synchronize()``, so timing does
    not add a host/device sync inside the loop.
    """

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._cpu_ms: list[float] = []
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._t0: float | None = None
        self._start_event: torch.cuda.Event | None = None
        self._starts: list[float] = []

    def start(self) -> None:
        self._starts.append(time.perf_counter())
        if self._cuda:
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self._cuda:
            assert self._start_event is not None, "stop() without start()"
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._start_event, end))
            self._start_event = None
        else:
            assert self._t0 is not None, "stop() without start()"
            self._cpu_ms.append((time.perf_counter() - self._t0) * 1e3)
            self._t0 = None

    @contextmanager
    def step(self) -> Iterator[None]:
        self.start()
        yield
        self.stop()

    def __len__(self) -> int:
        return len(self._events) if self._cuda else len(self._cpu_ms)

    def step_ms(self) -> list[float]:
        if self._cuda:
            torch.cuda.synchronize()
            return [start.elapsed_time(end) for start, end in self._events]
        return list(self._cpu_ms)

    def period_ms(self) -> list[float]:
        """Host time from each step's start to the next one's (one fewer than steps): the
        step with what runs between steps (batch fetch, ``prof.step()``, logging)."""
        return [(b - a) * 1e3 for a, b in zip(self._starts, self._starts[1:])]


def median_step_ms(step_ms: list[float], profiled_steps: list[int]) -> float | None:
    """Median over the steps after the first ``WARMUP_STEPS``, profiled ones left out."""
    skip = set(profiled_steps)
    kept = [ms for i, ms in enumerate(step_ms) if i >= WARMUP_STEPS and i not in skip]
    return statistics.median(kept) if kept else None


def emit_result(program: str, step_ms: list[float], profiled_steps: list[int],
                period_ms: list[float] | None = None) -> None:
    """Print the ``LOOP_RESULT`` line; call it last, nothing may follow on stderr.
    ``period_ms``: start-to-start times of the steps (:meth:`StepTimer.period_ms`)."""
    result = {
        "program": program,
        "iters": len(step_ms),
        "step_ms": [round(ms, 4) for ms in step_ms],
        "period_ms": [round(ms, 4) for ms in period_ms or []],
        "profiled_steps": list(profiled_steps),
        "median_step_ms": median_step_ms(step_ms, profiled_steps),
    }
    sys.stdout.flush()
    print("LOOP_RESULT " + json.dumps(result), file=sys.stderr, flush=True)
