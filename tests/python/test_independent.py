"""`tensight analyze --format json` summary against an independent count of the raw JSON
(independent_count.py: json + gzip only, written from the documented definitions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import independent_count
from helpers import KINETO_TRACES, PROBE_TRACE, REAL, analyze_json

REL = 1e-6  # counts, bytes, GPU busy %
MS = 1e-3  # times, in ms

# tensight's `step_source` text for each way the independent count finds steps.
SOURCE_TEXT = {
    "profiler_step": "ProfilerStep#N",
    "python_frame": "repeating Python frame",
    "annotation": "annotations",
    "whole_trace": "whole trace",
}



def _params() -> list[Any]:
    return [
        pytest.param(p, id=p.name.split(".")[0][:48])
        for p in KINETO_TRACES
    ]


@pytest.mark.parametrize("trace", _params())
def test_summary_matches_independent_count(trace: Path) -> None:
    mine = independent_count.count(trace)
    s = analyze_json(trace)["summary"]
    assert s["steps"] == mine.steps
    assert SOURCE_TEXT[mine.step_source] in s["step_source"], (s["step_source"], mine.step_source)
    assert s["step_time_ms"] == pytest.approx(mine.step_time_ms, abs=MS, rel=0)
    assert s["gpu_busy_pct"] == pytest.approx(mine.gpu_busy_pct, rel=REL, abs=1e-12)
    assert s["kernels"] == pytest.approx(mine.kernels, rel=REL, abs=0)
    assert s["h2d_bytes"] == pytest.approx(mine.h2d_bytes, rel=REL, abs=0)


def test_probe_figures() -> None:
    """The H200 probe, by hand: 3 steps of `probe.py(10): step`, 20 kernels and one
    384 KiB `.cuda()` copy each."""
    c = independent_count.count(PROBE_TRACE)
    assert (c.steps, c.step_source, c.kernels, c.h2d_bytes) == (3, "python_frame", 60, 3 * 384 * 1024)
    assert "probe.py(10): step" in analyze_json(PROBE_TRACE)["summary"]["step_source"]


def test_epoch_timestamps_exact_to_the_ns() -> None:
    """trace_compare-base has integer-us epoch timestamps: its two ProfilerStep ranges
    average exactly 137.268 ms (an f64 conversion of epoch microseconds was 48 ns off)."""
    s = analyze_json(REAL / "trace_compare-base-base.json.gz")["summary"]
    assert independent_count.count(REAL / "trace_compare-base-base.json.gz").step_time_ms == 137.268
    assert s["step_time_ms"] == pytest.approx(137.268, abs=1e-9, rel=0)


def test_script_prints_json() -> None:
    script = Path(independent_count.__file__)
    r = subprocess.run([sys.executable, str(script), str(PROBE_TRACE)],
                       capture_output=True, text=True, check=True, timeout=60)
    out = json.loads(r.stdout)[str(PROBE_TRACE)]
    assert out["steps"] == 3 and out["kernels"] == 60
