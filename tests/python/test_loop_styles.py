"""Steps in any program (issue 11): every loop style of tests/loop_styles, on CPU.

Each program is run twice: under ``tensight run`` (steps found live: optimizer steps,
module forwards or the loop watch) and with its own plain ``torch.profiler`` trace of 5
steps (no schedule: steps found by ``analyze``). Both must give the right number of steps
and a median step time within 10% of the program's own timing of the same run (its
``LOOP_RESULT``: every step's time by ``perf_counter``): no less than the median of the
timed steps, no more than their median with the time between steps counted in (a step
found in a trace runs from one boundary to the next, with the batch fetch, ``prof.step()``
or an epoch's eval pass between two steps in one of them).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import TENSIGHT

pytest.importorskip("torch", reason="the loop styles need torch")

LOOPS = Path(__file__).resolve().parents[1] / "loop_styles"
PROGRAMS = sorted(p.stem for p in LOOPS.glob("*.py") if not p.stem.startswith("_")
                  and p.stem != "check")
EXTRA = {"compiled_step": ["--backend", "aot_eager"], "dataloader_loop": ["--workers", "0"]}
TOLERANCE = 0.10
STEPS, WARMUP, ITERS = 4, 3, 24
TIMEOUT = 300


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSIGHT_")}
    env["PYTHONWARNINGS"] = "ignore"
    return env


def own(stderr: str) -> dict[str, Any]:
    line = next(x for x in reversed(stderr.splitlines()) if x.startswith("LOOP_RESULT "))
    result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    return result


def bounds(result: dict[str, Any], steps: list[int]) -> tuple[float, float]:
    """The program's median step time over `steps`, and the larger median of the same
    steps with the time between steps (batch fetch, ``prof.step()``, an epoch's eval)
    counted in: after each step (start to start) or before it (end to end), ms. A step
    found from boundaries in a trace lies between the two."""
    ms, period = result["step_ms"], result["period_ms"]
    timed = statistics.median(ms[i] for i in steps)
    gap = [p - t for p, t in zip(period, ms)]  # gap[i]: from step i's end to i+1's start
    after = [ms[i] + gap[i] for i in steps if i < len(gap)]
    before = [ms[i] + gap[i - 1] for i in steps if 0 < i <= len(gap)]
    wide = [statistics.median(v) for v in (after, before) if v]
    return timed, max([timed, *wide])


def close(got: float, want: tuple[float, float]) -> bool:
    return (1 - TOLERANCE) * want[0] <= got <= (1 + TOLERANCE) * want[1]


@pytest.mark.parametrize("name", PROGRAMS)
def test_tensight_run_finds_the_steps(name: str, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    cmd = [TENSIGHT, "run", "--steps", str(STEPS), "--warmup", str(WARMUP),
           "--out", str(bundle), "--", sys.executable, str(LOOPS / f"{name}.py"),
           "--iters", str(ITERS), "--device", "cpu", *EXTRA.get(name, [])]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((bundle / "report.json").read_text())  # stdout: the program's too
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["step_detection"] != "whole_program", r.stderr[-2000:]
    assert manifest["steps_recorded"] == STEPS
    assert report["summary"]["steps"] == STEPS, report["summary"]["step_source"]
    # The program's own times of the iterations recorded as timed steps, less the last
    # (its timer also holds the trace's export, at the boundary after it).
    first = manifest["first_step_index"] + manifest["warmup_steps"]
    theirs = bounds(own(r.stderr), list(range(first + 1, first + STEPS)))
    mine = statistics.median(s["dur_ms"] for s in report["steps"][:STEPS - 1])
    assert close(mine, theirs), (
        f"{name}: tensight {mine:.2f} ms, the program {theirs[0]:.2f} ms timed, "
        f"{theirs[1]:.2f} ms start to start ({manifest['step_detection']})")


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_plain_trace_has_its_steps_found(name: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    cmd = [sys.executable, str(LOOPS / f"{name}.py"), "--iters", "16", "--device", "cpu",
           "--trace", str(trace), "--trace-start", "6", "--trace-iters", "5",
           *EXTRA.get(name, [])]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    result = own(r.stderr)
    a = subprocess.run([TENSIGHT, "analyze", str(trace), "--format", "json"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert a.returncode == 0, a.stderr
    s = json.loads(a.stdout)["summary"]
    assert s["steps"] == 5, s["step_source"]
    theirs = bounds(result, result["profiled_steps"])
    assert close(s["step_time_median_ms"], theirs), (
        f"{name}: tensight {s['step_time_median_ms']:.2f} ms, the program {theirs[0]:.2f} ms "
        f"timed, {theirs[1]:.2f} ms start to start ({s['step_source']})")


def test_a_loop_that_ends_soon_after_its_window_is_kept_when_no_other_comes(
        tmp_path: Path) -> None:
    """setup_then_bench with one timed call: its setup loop's window is set aside when the
    loop ends, no later loop repeats, so that window is put back as the recording."""
    bundle = tmp_path / "b"
    cmd = [TENSIGHT, "run", "--steps", str(STEPS), "--warmup", str(WARMUP), "--stop",
           "--out", str(bundle), "--", sys.executable, str(LOOPS / "setup_then_bench.py"),
           "--iters", "1", "--device", "cpu"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "keeping that window while looking for a loop" in r.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["step_detection"] == "loop"
    assert manifest["step_loop"]["function"] == "assemble"
    assert manifest["steps_recorded"] == STEPS
    assert all((bundle / f).is_file() for f in ("trace.json.gz", "detail.json.gz"))
    assert not list(bundle.glob("*.aside"))
