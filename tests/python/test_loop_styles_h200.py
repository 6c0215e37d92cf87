"""The loop styles of tests/loop_styles as recorded on the H200 (issue 11).

``scripts/h200/loop_styles.sh`` recorded each program once as a plain ``torch.profiler``
trace of 5 iterations (no schedule, no ``ProfilerStep``), with the program's own timing of
every iteration (``context.txt`` names the GPU: the H200, and an H100 for a style recorded
when no H200 was lent). ``analyze`` must find the 5 steps and a median step time within 10% of
the program's own median over the same iterations: on a GPU the host enqueues iterations
ahead of the GPU, so the steps are the iteration period, not the host's ranges.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from helpers import TENSIGHT

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "loop_styles_h200"
PROGRAMS = sorted(p.name.removesuffix(".json.gz") for p in FIXTURES.glob("*.json.gz"))
LOOPS = Path(__file__).resolve().parents[1] / "loop_styles"
#: Styles not recorded yet, each with the reason (the file says how to record them).
UNRECORDED = {k: v for k, v in json.loads((FIXTURES / "UNRECORDED.json").read_text()).items()
              if not k.startswith("_")}


def test_every_loop_style_was_recorded_or_is_listed_with_why() -> None:
    styles = {p.stem for p in LOOPS.glob("*.py") if not p.stem.startswith("_") and p.stem != "check"}
    assert set(PROGRAMS) | set(UNRECORDED) == styles, "record new styles, or list them in UNRECORDED.json"
    assert not set(PROGRAMS) & set(UNRECORDED), "recorded now: take it off UNRECORDED.json"
    assert all(len(why) > 20 for why in UNRECORDED.values())


@pytest.mark.parametrize("name", PROGRAMS)
def test_an_h200_trace_has_its_steps_found(name: str) -> None:
    own = json.loads((FIXTURES / f"{name}.result.json").read_text())
    a = subprocess.run([TENSIGHT, "analyze", str(FIXTURES / f"{name}.json.gz"), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert a.returncode in (0, 1), a.stderr
    s = json.loads(a.stdout)["summary"]
    assert s["steps"] == len(own["profiled_steps"]) == 5, s["step_source"]
    theirs = statistics.median(own["step_ms"][i] for i in own["profiled_steps"])
    got = s["step_time_median_ms"]
    assert abs(got - theirs) <= 0.10 * theirs, f"{name}: tensight {got:.2f} ms, own {theirs:.2f} ms"
