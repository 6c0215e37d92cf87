"""The speculative profile (see :mod:`tensight.collect`): from the program's start to its
first step boundary, kept in memory only in case no window gets recorded (then written as
``whole_program``); the ops it recorded say which loop holds the work
(:func:`candidates`)."""

from __future__ import annotations

import bisect
import threading
from pathlib import Path
from typing import Any

import torch
from torch.profiler import profile

from tensight import bundle as contract
from tensight import profiling
from tensight.loops import Loop
from tensight.profiling import quiet, say

__all__ = ["Speculative", "candidates"]


class Speculative:
    """The speculative profile of the program recorded into `bundle`: `prof` (running or
    stopped and kept, else None), `full` (CUDA and stacks, else the CPU only), `tid` (the
    thread that started it), `started` (whether one ever started)."""

    def __init__(self, bundle: Path) -> None:
        self.bundle = bundle
        self.prof: Any = None
        self.running = False
        self.full = False
        self.tid: int | None = None
        self.started = False

    @property
    def _et_json(self) -> Path:
        return self.bundle / "et.spec.json"

    def options(self) -> dict[str, Any]:
        return profiling.FULL if self.full else profiling.LIGHT

    def start(self, full: bool, cuda: bool | None = None) -> None:
        if profiling.profiler_running():
            return
        et = profiling.observer(self._et_json)
        opts = dict(profiling.FULL if full else profiling.LIGHT)
        use_cuda = full and (torch.cuda.is_initialized() if cuda is None else cuda)
        self.prof = profile(activities=profiling.activities(use_cuda), **opts,
                            execution_trace_observer=et)
        profiling.start(self.prof)
        self.running = True
        self.started = True
        self.full = full
        self.tid = threading.get_ident()

    def restart(self, full: bool, cuda: bool | None = None) -> None:
        """A new profile from here (the one kept, if any, is dropped)."""
        self.prof = None
        self.start(full, cuda)

    def on_cuda_init(self) -> None:
        """CUDA initialized: start with CUDA and stacks, replacing a light profile (started
        in this thread) if any."""
        if self.running:
            if self.tid != threading.get_ident():
                return
            self.stop()
            self.prof = None
        self.start(True, cuda=True)  # torch.cuda.is_initialized() is still False

    def stop(self) -> None:
        """Stop it, keeping its results in memory."""
        if self.prof is not None and self.running:
            self.running = False
            try:
                with quiet():
                    self.prof.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - e.g. the program's own torch.profiler took over
                self.discard()

    def discard(self) -> None:
        prof, self.prof = self.prof, None
        self.running = False
        et = getattr(prof, "execution_trace_observer", None)
        if et is not None and et.is_registered:
            with quiet():
                et.unregister_callback()
        contract.remove(self._et_json)

    def forget(self) -> None:
        """The window is written: the fallback is not needed any more."""
        self.prof = None
        contract.remove(self._et_json)

    def op_start_times(self) -> list[int] | None:
        return profiling.op_start_times(self.prof) if self.prof is not None else None

    def write(self) -> bool:
        """Write the stopped profile as the bundle's trace (and execution trace); whether
        the trace was written. It is dropped either way."""
        written = False
        try:
            profiling.export(self.prof, self.bundle / contract.TRACE)
            written = True
            if self._et_json.exists():
                contract.gzip_to(self._et_json, self.bundle / contract.EXECUTION_TRACE)
        except Exception as e:  # noqa: BLE001
            say(f"could not write the trace ({type(e).__name__}: {e})")
        self.prof = None
        return written


def candidates(chain: list[Loop], times: list[int] | None,
               now: int) -> list[tuple[int, int, int, int, float]]:
    """The engine's loop candidates (``_native.choose_loop``) of `chain` (outermost first):
    depth, iterations, span and the share of the ops (start times `times`, from the
    speculative profile; None: unknown) recorded since the loop started that ran inside
    its iterations."""
    cands = []
    for depth, lp in enumerate(chain):
        first, last = lp.ends[0], lp.ends[-1]
        if times is None:
            share = 1.0
        else:
            inside = _count(times, first, last)
            share = inside / max(1, _count(times, first, now)) if inside else 0.0
        cands.append((depth, lp.count - 1, last - first, last - first, share))
    return cands


def _count(times: list[int], lo: int, hi: int) -> int:
    return bisect.bisect_right(times, hi) - bisect.bisect_left(times, lo)
