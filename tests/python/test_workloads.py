"""CI re-checks the accuracy harness's diagnosis on the bundle of every workload, as the
H200 recorded it (tests/fixtures/workloads, timings.json beside them): the table that
workloads/harness.py makes from them must be the committed one, and meet issue 5's bar."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "workloads"
HARNESS = ROOT / "workloads" / "harness.py"


def table(tmp_path: Path) -> dict:
    r = subprocess.run([sys.executable, str(HARNESS), "--from", str(FIXTURES), "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc: dict = json.loads((tmp_path / "results.json").read_text())
    return doc


def test_every_workload_has_a_bundle_and_a_timing() -> None:
    sys.path.insert(0, str(HARNESS.parent))
    from harness import EXPECTED  # type: ignore[import-not-found]

    timings = json.loads((FIXTURES / "timings.json").read_text())["workloads"]
    for name in EXPECTED:
        assert (FIXTURES / name / "manifest.json").is_file(), name
        assert timings[name]["unfixed_ms"] > 0 and timings[name]["fixed_ms"] > 0, name


#: Workloads whose primary is not the planted one, and what it is instead: since G001
#: counts chains of long kernels (2026-12-02), transposed_chain's seven chained passes over
#: an 8192² tensor (G001, 1.48 ms) outrank its planted transposed view (V003, 0.86 ms
#: estimated, 0.75 ms measured), which is still reported, second.
KNOWN_MISSES = {"transposed_chain": "G001"}


def v003(r: dict[str, Any]) -> dict[str, Any]:
    """The V003 finding of a report."""
    return next(f for f in r["diagnosis"]["bottlenecks"] if f["code"] == "V003")


def test_diagnosis_on_the_recorded_bundles(tmp_path: Path) -> None:
    doc = table(tmp_path)
    rows = {r["workload"]: r for r in doc["rows"]}
    for r in rows.values():
        if r["expected"] not in (None, "real") and r["workload"] not in KNOWN_MISSES:
            assert r["primary"] == r["expected"], r
    for name, primary in KNOWN_MISSES.items():
        assert rows[name]["primary"] == primary, rows[name]  # a miss that changes is news
    for name in ("control_bf16_gemm", "control_resnet50"):
        assert rows[name]["severe_findings"] == [], rows[name]
    s = doc["summary"]
    assert s["planted"] >= 15 and s["primary_as_expected"] == s["planted"] - len(KNOWN_MISSES), s
    assert s["estimate_within_35pct"] >= 12, s
    # Against the bundle's own unprofiled steps (the workloads whose step time moves between
    # runs: device_ping_pong, dataloader_starvation, allocator_churn) the estimates hold too.
    assert s["estimate_within_35pct_same_run"] >= 14, s
    # The committed table is what this engine makes of these bundles.
    committed = json.loads((ROOT / "workloads" / "results.json").read_text())
    assert committed["summary"] == s
    assert [(r["workload"], r["primary"], r["estimated_saving_ms"]) for r in committed["rows"]] == \
        [(r["workload"], r["primary"], r["estimated_saving_ms"]) for r in doc["rows"]]
    # The plot of estimated against measured saving: well-formed, a point per estimate
    # (tuned and hold-out) and the two of the legend, and the committed one.
    svg = (tmp_path / "savings.svg").read_text()
    assert svg == (ROOT / "workloads" / "savings.svg").read_text()
    tuned = sum(1 for r in doc["rows"] if r["expected"] not in (None, "real")
                and (r["measured_saving_ms"] or 0) > 0 and r["estimated_saving_ms"] is not None)
    held = json.loads((ROOT / "holdout" / "results-after.json").read_text())["rows"]
    held_n = sum(1 for r in held for p in r["run1"].get("problems", [])
                 if (p["measured_ms"] or 0) > 0 and p["estimated_ms"] is not None)
    circles = ElementTree.fromstring(svg).findall("{http://www.w3.org/2000/svg}circle")
    assert len(circles) == tuned + held_n + 2 and tuned >= 15 and held_n >= 10


def report(bundle: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "tensight", "analyze", str(bundle), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out: dict = json.loads(r.stdout)
    return out


def measured_saving(name: str) -> float:
    t = json.loads((FIXTURES / "timings.json").read_text())["workloads"][name]
    return float(t["unfixed_ms"] - t["fixed_ms"])


def test_v001_names_the_view_with_measured_sectors_and_is_silent_once_fixed() -> None:
    r = report(FIXTURES / "transposed_view")
    v = next(f for f in r["diagnosis"]["bottlenecks"] if f["code"] == "V001")
    assert "transposed" in v["message"] and "sectors per request" in v["message"]
    labels = {e["label"]: e["value"] for e in v["evidence"]}
    # The tensor forest names the op that made the view, not the as_strided beneath it.
    assert labels["created by"] == "aten::t at transposed_view.py(23): step", labels
    assert float(labels["load sectors per request"]) > 3 * float(labels["ideal sectors per request"].split()[0])
    fixed = report(ROOT / "tests" / "fixtures" / "bundles" / "h200-transposed-view-fixed")
    assert fixed["bundle"]["options"]["hardware"] is True
    assert not [f for f in fixed["diagnosis"]["bottlenecks"] if f["code"].startswith("V")]


def test_v001_with_the_full_hardware_pass_shows_where_the_warps_wait() -> None:
    # Recorded with the default pass (repeats skipped, 40 metrics, forward and backward).
    b = ROOT / "tests" / "fixtures" / "bundles" / "h200-transposed-view-hw"
    r = report(b)
    v = r["diagnosis"]["primary_bottleneck"]
    assert v["code"] == "V001", v
    labels = {e["label"]: e["value"] for e in v["evidence"]}
    # A strided read waits on global memory: the long scoreboard leads the breakdown.
    stalls = labels["warp stalls (share of warp cycles)"]
    assert stalls.startswith("long scoreboard "), stalls
    assert int(stalls.split()[2].rstrip("%,")) >= 50, stalls
    measured = measured_saving("transposed_view")
    assert abs(v["saving_ms"] - measured) <= 0.35 * measured, (v["saving_ms"], measured)
    pass_ = r["bundle"]["hardware"]
    assert pass_["status"] == "recorded" and pass_["launches"] == "repeated op calls skipped", pass_
    assert pass_["op_calls"] == 16 and pass_["op_repeats"] == 0, pass_
    h = r["hardware"]
    assert h["kernels_with_counters"] == h["trace_kernels"], h  # backward kernels included


def test_v002_names_the_copied_view_its_line_and_the_redundant_copies() -> None:
    r = report(FIXTURES / "contiguous_churn")
    v = r["diagnosis"]["primary_bottleneck"]
    assert v["code"] == "V002", v
    labels = {e["label"]: e["value"] for e in v["evidence"]}
    assert labels["copies in the step"].startswith("4,"), labels
    assert "transposed" in labels["view copied"] and "contiguous_churn.py(22)" in labels["view copied"]
    assert "(redundant)" in labels["copy 4"] and "(redundant)" not in labels["copy 1"]
    assert any("contiguous_churn.py(22)" in (loc.get("source") or "") for loc in v["locations"])
    assert abs(v["saving_ms"] - measured_saving("contiguous_churn")) <= 0.35 * measured_saving("contiguous_churn")


def test_v003_names_the_transpose_and_the_chain_with_and_without_hardware(tmp_path: Path) -> None:
    measured = measured_saving("transposed_chain")
    r = report(FIXTURES / "transposed_chain")
    codes = [f["code"] for f in r["diagnosis"]["bottlenecks"]]
    v = v003(r)  # second to G001 (KNOWN_MISSES)
    assert "V001" not in codes, codes  # the chain's kernels are V003's
    labels = {e["label"]: e["value"] for e in v["evidence"]}
    assert labels["created by"] == "aten::t at transposed_chain.py(27): step", labels
    assert "measured sectors" in v["estimate"] or "measured sectors" in str(v["evidence"])
    assert abs(v["saving_ms"] - measured) <= 0.35 * measured, (v["saving_ms"], measured)
    # Without the hardware pass the excess comes from the kernels' own times.
    bare = tmp_path / "transposed_chain"
    shutil.copytree(FIXTURES / "transposed_chain", bare)
    (bare / "ncu.csv.gz").unlink()
    manifest = json.loads((bare / "manifest.json").read_text())
    manifest.pop("hardware", None)
    (bare / "manifest.json").write_text(json.dumps(manifest))
    m = v003(report(bare))
    assert "dense bytes" in m["estimate"], m
    assert abs(m["saving_ms"] - measured) <= 0.35 * measured, (m["saving_ms"], measured)


def test_view_rules_fire_only_where_planted() -> None:
    planted = {"transposed_view": "V001", "contiguous_churn": "V002", "transposed_chain": "V003"}
    for d in sorted(p for p in FIXTURES.iterdir() if (p / "manifest.json").is_file()):
        fired = {f["code"] for f in report(d)["diagnosis"]["bottlenecks"] if f["code"].startswith("V")}
        expect = {planted[d.name]} if d.name in planted else set()
        assert fired == expect, (d.name, fired)


def test_hardware_pass_covers_the_backward_pass_and_the_fixed_chain_is_quiet() -> None:
    # Recorded with the process-wide NVTX range: the backward kernels are profiled too.
    bundles = ROOT / "tests" / "fixtures" / "bundles"
    hw = report(bundles / "h200-transposed-chain-hw")
    assert hw["bundle"]["options"]["hardware"] is True
    v = v003(hw)
    assert "measured sectors" in v["estimate"], v
    measured = measured_saving("transposed_chain")
    assert abs(v["saving_ms"] - measured) <= 0.35 * measured, (v["saving_ms"], measured)
    manifest = json.loads((bundles / "h200-transposed-chain-hw" / "manifest.json").read_text())
    assert manifest["hardware"]["kernels"] >= 12, manifest["hardware"]  # forward 5 + backward
    fixed = report(bundles / "h200-transposed-chain-fixed")
    codes = {f["code"] for f in fixed["diagnosis"]["bottlenecks"]}
    assert not codes & {"V002", "V003"}, codes
    # What remains is the one transposing copy the fix makes: V001 names that copy and
    # says it is the materialization (no "materialize it once" advice).
    for f in fixed["diagnosis"]["bottlenecks"]:
        if f["code"] == "V001":
            assert "aten::copy_" in f["message"], f
            assert f["title"].startswith("A copy materializes a transposed view"), f
            assert "already the materializing copy (`aten::contiguous`)" in f["fixes"][0], f
    # Recorded with repeated op calls skipped (the default): the one repeat's kernel
    # takes the counters of its first launch; every traced kernel has counters.
    fm = json.loads((bundles / "h200-transposed-chain-fixed" / "manifest.json").read_text())
    assert fm["hardware"]["launches"] == "repeated op calls skipped", fm["hardware"]
    assert (fm["hardware"]["op_repeats"], fm["hardware"]["kernels"]) == (1, 12), fm["hardware"]
    h = fixed["hardware"]
    assert (h["rows"], h["step_kernels"], h["rows_matched"]) == (12, 13, 12), h
    assert h["kernels_with_counters"] == h["trace_kernels"] == 52, h
    assert h["by_signature_other_shapes"] == 0, h
