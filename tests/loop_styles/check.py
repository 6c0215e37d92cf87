#!/usr/bin/env python3
"""Smoke check for the loop-style programs (CPU by default; a few minutes).

Runs every program (on CPU unless ``--device``) with ``--iters 20`` twice: once plainly and once
with ``--trace <tmp>.json --trace-start 8 --trace-iters 5`` (dataloader_loop
also runs once with ``--workers 0``).  For each run it checks that the last
stderr line is a parseable ``LOOP_RESULT`` with the right program name,
``iters``, ``len(step_ms) == iters`` and the expected ``profiled_steps``; for
traced runs that the trace is valid JSON with a non-empty ``traceEvents``.
Prints a table and exits non-zero on any failure.

    python3 tests/loop_styles/check.py [--only NAME ...] [--keep-traces DIR] [--device cuda --backend inductor]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: program -> extra arguments for every run of it.
PROGRAMS: dict[str, list[str]] = {
    "optimizer_loop": [],
    "inference_module": [],
    "plain_function": [],
    "while_sgd": [],
    "compiled_step": [],  # gets --backend from check.py's --backend
    "grad_accumulation": [],
    "dataloader_loop": [],
    "timing_sync_loop": [],
    "nested_epochs": [],
    "generator_loop": [],
    "trainer_class": [],
    "gan_two_optimizers": [],
}
#: Extra plain runs: (label, program, extra arguments).
EXTRA_RUNS: list[tuple[str, str, list[str]]] = [
    ("dataloader_loop --workers 0", "dataloader_loop", ["--workers", "0"]),
]

TRACE_START, TRACE_ITERS = 8, 5


@dataclass
class Run:
    label: str
    traced: bool
    seconds: float = 0.0
    median_ms: float | None = None
    trace_events: int | None = None
    errors: list[str] = field(default_factory=list)
    stderr_tail: str = ""


def parse_loop_result(stderr: str) -> dict[str, Any]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines:
        raise ValueError("empty stderr, no LOOP_RESULT line")
    last = lines[-1]
    prefix = "LOOP_RESULT "
    if not last.startswith(prefix):
        raise ValueError(f"last stderr line is not LOOP_RESULT: {last[:120]!r}")
    result = json.loads(last[len(prefix):])
    if not isinstance(result, dict):
        raise ValueError("LOOP_RESULT payload is not a JSON object")
    return result


def check_result(result: dict[str, Any], program: str, iters: int, traced: bool) -> list[str]:
    errors: list[str] = []
    for key in ("program", "iters", "step_ms", "profiled_steps", "median_step_ms"):
        if key not in result:
            errors.append(f"LOOP_RESULT lacks {key!r}")
    if errors:
        return errors
    if result["program"] != program:
        errors.append(f"program is {result['program']!r}, expected {program!r}")
    if result["iters"] != iters:
        errors.append(f"iters is {result['iters']}, expected {iters}")
    step_ms = result["step_ms"]
    if not isinstance(step_ms, list) or len(step_ms) != result["iters"]:
        errors.append(f"len(step_ms) = {len(step_ms) if isinstance(step_ms, list) else '?'} != iters {result['iters']}")
    elif not all(isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0 for ms in step_ms):
        errors.append("step_ms has a non-positive or non-finite entry")
    expected = list(range(TRACE_START, TRACE_START + TRACE_ITERS)) if traced else []
    if result["profiled_steps"] != expected:
        errors.append(f"profiled_steps is {result['profiled_steps']}, expected {expected}")
    if not isinstance(result["median_step_ms"], (int, float)):
        errors.append(f"median_step_ms is {result['median_step_ms']!r}")
    return errors


def run_one(
    label: str, program: str, extra: list[str], iters: int, device: str, trace: Path | None, timeout: float
) -> Run:
    cmd = [sys.executable, str(HERE / f"{program}.py"), "--device", device, "--iters", str(iters), *extra]
    if trace is not None:
        trace.unlink(missing_ok=True)
        cmd += ["--trace", str(trace), "--trace-start", str(TRACE_START), "--trace-iters", str(TRACE_ITERS)]
    run = Run(label=label, traced=trace is not None)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        run.seconds = time.perf_counter() - t0
        run.errors.append(f"timed out after {timeout:.0f} s")
        return run
    run.seconds = time.perf_counter() - t0
    run.stderr_tail = "\n".join(proc.stderr.splitlines()[-15:])
    if proc.returncode != 0:
        run.errors.append(f"exit status {proc.returncode}")
        return run
    try:
        result = parse_loop_result(proc.stderr)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        run.errors.append(str(exc))
        return run
    run.errors += check_result(result, program, iters, trace is not None)
    run.median_ms = result.get("median_step_ms")
    if trace is not None:
        try:
            with trace.open() as f:
                doc = json.load(f)
            events = doc.get("traceEvents") if isinstance(doc, dict) else None
            if not isinstance(events, list) or not events:
                run.errors.append("trace has no traceEvents")
            else:
                run.trace_events = len(events)
        except (OSError, ValueError) as exc:
            run.errors.append(f"trace unreadable: {exc}")
    return run


def fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="check only these programs")
    parser.add_argument("--keep-traces", type=Path, metavar="DIR", help="write traces here and keep them")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    parser.add_argument("--device", default="cpu", help="device passed to every program")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile backend for compiled_step")
    args = parser.parse_args()

    PROGRAMS["compiled_step"] = ["--backend", args.backend]
    names = args.only or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown programs {unknown}; known: {list(PROGRAMS)}")
    trace_dir = args.keep_traces or Path(tempfile.mkdtemp(prefix="loop_styles_check_"))
    trace_dir.mkdir(parents=True, exist_ok=True)

    rows: list[tuple[Run, Run | None]] = []
    try:
        jobs = [(n, n, PROGRAMS[n], True) for n in names]
        jobs += [(label, prog, PROGRAMS[prog] + extra, False) for label, prog, extra in EXTRA_RUNS if prog in names]
        for label, program, extra, with_trace in jobs:
            plain = run_one(label, program, extra, args.iters, args.device, None, args.timeout)
            traced = (
                run_one(label, program, extra, args.iters, args.device, trace_dir / f"{program}.json", args.timeout)
                if with_trace
                else None
            )
            rows.append((plain, traced))
            status = "ok" if not plain.errors and not (traced and traced.errors) else "FAIL"
            print(f"[{status}] {label}", file=sys.stderr, flush=True)
    finally:
        if args.keep_traces is None:
            shutil.rmtree(trace_dir, ignore_errors=True)

    header = ("program", "median ms", "median ms (traced)", "trace events", "s plain", "s traced")
    table = [header]
    for plain, traced in rows:
        table.append((
            plain.label,
            fmt(plain.median_ms, ".2f"),
            fmt(traced.median_ms if traced else None, ".2f"),
            fmt(traced.trace_events if traced else None, "d"),
            fmt(plain.seconds, ".1f"),
            fmt(traced.seconds if traced else None, ".1f"),
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))

    failures = [run for pair in rows for run in pair if run is not None and run.errors]
    for run in failures:
        kind = "traced" if run.traced else "plain"
        print(f"\nFAIL {run.label} ({kind}): " + "; ".join(run.errors), file=sys.stderr)
        if run.stderr_tail:
            print("  stderr tail:\n    " + run.stderr_tail.replace("\n", "\n    "), file=sys.stderr)
    print(f"\n{len(rows) * 2 - sum(1 for _, t in rows if t is None) - len(failures)} runs passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
