"""The README agrees with the code on what the code knows: the JSON schema version, the
bundle format version and the demos."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

import tensight
from helpers import TENSIGHT

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_schema_version() -> None:
    said = re.search(r"`schema_version`, now (\d+\.\d+)", README)
    assert said, "the README names the JSON schema version"
    assert said.group(1) == tensight.analyze(ROOT / "tests/fixtures/h200-probe/kineto_trace.json.gz")[
        "schema_version"]


def test_bundle_format_version() -> None:
    contract = json.loads((ROOT / "python/tensight/contract.json").read_text())
    said = re.search(r"`manifest.json` \(format\s+(\d+\.\d+)", README)
    assert said, "the README names the bundle format version"
    assert said.group(1) == contract["format_version"]


def test_demos_in_the_readme_exist() -> None:
    helped = subprocess.run([TENSIGHT, "demo", "--help"], capture_output=True, text=True,
                            timeout=60).stdout
    for name in re.findall(r"tensight demo (?:\[NAME\]\s+# real H200 profiles: )?([a-z0-9][a-z0-9-]*)",
                           README):
        if name != "NAME":
            assert f"- {name}:" in helped, name


_RUN = ("after.primary_ok_run1", "after.planted", "after.estimate_ok_run1",
        "before.primary_ok_run1", "before.estimate_ok_run1")
_HOLDOUT_SENTENCES = [
    ("holdout", r"names a planted problem on (\d+)/(\d+) \(`tensight\s+run`\) and every "
                r"estimated saving is\s+within ±35% on (\d+)/\d+ \(before this round's rule\s+"
                r"changes: (\d+)/\d+ and (\d+)/\d+\)", _RUN),
    ("holdout_b", r"changes without tuning on it\): (\d+)/(\d+)\s+primaries and (\d+)/\d+ "
                  r"estimates\s+\(before: (\d+)/\d+ and (\d+)/\d+\)", _RUN),
    ("holdout_c", r"tuned on since\): (\d+)/(\d+)\s+primaries and (\d+)/\d+\s+"
                  r"estimates\s+\(before: (\d+)/\d+ and (\d+)/\d+; plain traces (\d+)/\d+, "
                  r"was (\d+)/\d+\)", _RUN + ("after.primary_ok_plain", "before.primary_ok_plain")),
    ("holdout_d", r"S001\s+changes since\): (\d+)/(\d+)\s+primaries and (\d+)/\d+ "
                  r"estimates\s+\(before: (\d+)/\d+ and (\d+)/\d+; plain traces\s+(\d+)/\d+, "
                  r"was (\d+)/\d+\)", _RUN + ("after.primary_ok_plain", "before.primary_ok_plain")),
    ("holdout_e", r"without a hardware\s+pass\): (\d+)/(\d+)\s+primaries and (\d+)/\d+ "
                  r"estimates\s+\(before: (\d+)/\d+ and (\d+)/\d+; plain\s+traces\s+(\d+)/\d+, "
                  r"was\s+(\d+)/\d+\)", _RUN + ("after.primary_ok_plain", "before.primary_ok_plain")),
    ("holdout_f", r"resnet18_cifar and\s+vit_linear_probe drove\): (\d+)/(\d+) primaries and "
                  r"(\d+)/\d+ estimates\s+\(before: (\d+)/\d+ and (\d+)/\d+;", _RUN),
    ("holdout_g", r"With the engine that recorded it: (\d+)/(\d+) primaries and (\d+)/\d+ "
                  r"estimates\s+\(plain traces (\d+)/\d+,[^)]*\)[\s\S]*?Session 25's\s+three "
                  r"changes,[^,]*, give (\d+)/\d+ and (\d+)/\d+ \(`after`\)",
     ("before.primary_ok_run1", "before.planted", "before.estimate_ok_run1",
      "before.primary_ok_plain", "after.primary_ok_run1", "after.estimate_ok_run1")),
]


@pytest.mark.parametrize("folder, sentence, keys", _HOLDOUT_SENTENCES)
def test_holdout_figures_match_the_recorded_results(folder: str, sentence: str,
                                                    keys: tuple[str, ...]) -> None:
    s = {t: json.loads((ROOT / f"{folder}/results-{t}.json").read_text())["summary"]
         for t in ("before", "after")}
    said = re.search(sentence, README)
    assert said, f"the README states {folder}'s accuracy"
    want = [s[k.split(".")[0]][k.split(".")[1]] for k in keys]
    assert [int(g) for g in said.groups()] == want


def test_accuracy_figures_match_the_recorded_results() -> None:
    s = json.loads((ROOT / "workloads/results.json").read_text())["summary"]
    said = re.search(r"the planted one on (\d+)/(\d+), the estimated\s+saving within ±35% of "
                     r"the measured one on (\d+)/\d+ against separate timing runs, and on "
                     r"(\d+)/\d+", README)
    assert said, "the README states the workloads' accuracy"
    assert [int(g) for g in said.groups()] == [
        s["primary_as_expected"], s["planted"], s["estimate_within_35pct"],
        s["estimate_within_35pct_same_run"]]
