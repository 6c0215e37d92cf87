"""The hold-out sets whose recordings are committed (holdout/ as set A, tuned on since;
holdout_f/, not tuned on), as the H200 recorded them: the first `tensight run`
recording of each program (tests/fixtures/<set>, timings.json beside them). CI re-scores
them with this engine: the committed `<set>/results-after.json` (what
workloads/RESULTS.md and the README report) must be what this engine says of them.
The second recordings and the plain traces are not committed (size), so only the
`tensight run` column is re-derived here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "holdout" / "harness.py"
# (the set's folder, its fixtures, the controls it has)
SETS = [("holdout", ROOT / "tests" / "fixtures" / "holdout", 1),
        ("holdout_f", ROOT / "tests" / "fixtures" / "holdout_f", 1)]


@pytest.mark.parametrize("folder, fixtures, controls", SETS)
def test_every_program_was_recorded(folder: str, fixtures: Path, controls: int) -> None:
    expected = {k for k in json.loads((ROOT / folder / "EXPECTED.json").read_text())
                if not k.startswith("_")}
    timings = json.loads((fixtures / "timings.json").read_text())["programs"]
    assert set(timings) == expected
    for name in expected:
        assert (fixtures / name / "run1" / "manifest.json").is_file(), name
        assert timings[name]["unfixed_ms"] > 0 and timings[name]["fixed_ms"] > 0, name


@pytest.mark.parametrize("folder, fixtures, controls", SETS)
def test_the_committed_scores_are_this_engines(folder: str, fixtures: Path, controls: int,
                                               tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(HARNESS), "--set", str(ROOT / folder), "--from",
                        str(fixtures), "--tag", "ci", "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "results-ci.json").read_text())
    committed = json.loads((ROOT / folder / "results-after.json").read_text())
    key = lambda doc: [(x["program"], x["run1"].get("primary"),
                        [p["estimated_ms"] for p in x["run1"].get("problems", [])]) for x in doc["rows"]]
    assert key(got) == key(committed)
    assert got["summary"]["primary_ok_run1"] == committed["summary"]["primary_ok_run1"]
    assert got["summary"]["controls_clean"] == committed["summary"]["controls_clean"] == controls
