"""`import tensight`: analyze() returns the documented report dict; errors are ValueError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tensight
from helpers import PROBE_TRACE, REAL, analyze_json, assert_primary_is_largest_saving

TOP_KEYS = {
    "schema_version", "tensight_version", "input", "trace", "device", "distributed",
    "summary", "steps", "kernels", "top_ops_gpu", "top_ops_cpu", "syncs", "compute",
    "roofline", "diagnosis", "import", "bundle", "execution_trace", "tensors", "hardware",
    "syncs_outside", "detail", "held_back",
}
SUMMARY_KEYS = {
    "steps", "step_source", "step_time_ms", "step_time_median_ms", "total_time_ms",
    "gpu_busy_pct", "gpu_busy_ms_per_step", "gpu_idle_ms_per_step", "kernels",
    "kernels_per_step", "h2d_count", "h2d_bytes", "h2d_pageable", "d2h_count", "d2h_bytes",
    "d2h_pageable", "d2d_count", "d2d_bytes", "syncs",
}
FINDING_KEYS = {
    "code", "rule", "category", "title", "message", "severity", "saving_ms", "saving_pct",
    "estimate", "evidence", "explanation", "fixes", "locations",
}
# Present on findings the simulator replays (since schema 1.6), absent on the others.
OPTIONAL_FINDING_KEYS = {"marginal_ms"}


def test_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", tensight.__version__)
    assert "analyze" in tensight.__all__


def test_analyze_returns_the_documented_dict() -> None:
    r = tensight.analyze(PROBE_TRACE)
    assert set(r) == TOP_KEYS
    assert set(r["summary"]) == SUMMARY_KEYS
    assert r["schema_version"] == "1.7"
    assert r["tensight_version"] == tensight.__version__
    assert r["input"] == str(PROBE_TRACE)
    assert r["device"]["name"] == "NVIDIA H200"
    assert len(r["steps"]) == r["summary"]["steps"] == 3
    d = r["diagnosis"]
    assert d["bottlenecks"] and d["primary_bottleneck"] is not None
    assert_primary_is_largest_saving(d)
    for f in d["bottlenecks"]:
        assert FINDING_KEYS <= set(f) <= FINDING_KEYS | OPTIONAL_FINDING_KEYS
    assert any("marginal_ms" in f for f in d["bottlenecks"])
    assert any(f["code"] == "S001" for f in d["bottlenecks"])


def test_analyze_accepts_str_and_pathlike() -> None:
    assert tensight.analyze(str(PROBE_TRACE))["summary"] == tensight.analyze(PROBE_TRACE)["summary"]


def test_api_matches_cli_json() -> None:
    trace = REAL / "tracelens-h100-gaunernst_bert-small-uncased-1016001.json.gz"
    api, cli = tensight.analyze(trace), analyze_json(trace)
    assert api["summary"] == cli["summary"]
    assert api["diagnosis"] == cli["diagnosis"]


def _make_bad(kind: str, tmp: Path) -> Path:
    match kind:
        case "nonexistent":
            return tmp / "missing.json.gz"
        case "empty_dir":
            (tmp / "empty").mkdir()
            return tmp / "empty"
        case "not_json":
            (tmp / "notes.json").write_text("hello\n")
            return tmp / "notes.json"
        case "not_a_trace":
            (tmp / "a.json").write_text('{"a": 1}')
            return tmp / "a.json"
        case "execution_trace":
            return REAL / "execution_trace-benchmark_simple_add_et.json.gz"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["nonexistent", "empty_dir", "not_json", "not_a_trace", "execution_trace"])
def test_bad_path_raises_value_error_with_one_line(kind: str, tmp_path: Path) -> None:
    path = _make_bad(kind, tmp_path)
    with pytest.raises(ValueError) as e:
        tensight.analyze(path)
    msg = str(e.value)
    assert path.name in msg
    assert "\n" not in msg, f"the message is not one line: {msg!r}"
    assert "panicked" not in msg
