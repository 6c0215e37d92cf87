"""The Ray scale-out path (`tensight merge --ray`, tensight.distributed) on a local Ray.

A 64-rank synthetic job (rank 37 pauses 3 ms per step before its last collective) is
written by the engine's `rank_set` example (the build `cargo test` already made); every
rank is summarized in a Ray task and merged, and the cross-rank report must equal the
local `tensight analyze DIR`'s and `summarize` + `merge`'s: the same findings (codes,
savings), straggler and per-rank figures. Without Ray the command says how to get it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, assert_no_crash, assert_user_error, run

RANKS, STRAGGLER, GAP_US = 64, 37, 3000


def _findings(report: dict[str, Any]) -> list[tuple[str, float, str]]:
    return [(f["code"], f["saving_ms"], f["title"]) for f in report["diagnosis"]["bottlenecks"]]


def assert_same_cross_rank_report(ray: dict[str, Any], local: dict[str, Any]) -> None:
    """Everything but the input's name (summaries, not the folder) is equal."""
    assert _findings(ray) == _findings(local)
    assert ray["diagnosis"] == local["diagnosis"]
    assert ray["ranks"] == local["ranks"]
    assert ray["schema_version"] == local["schema_version"]


@pytest.fixture(scope="module")
def rank_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("no cargo: the 64-rank set is made by the engine's rank_set example")
    out = tmp_path_factory.mktemp("ranks") / "job"
    # cargo test built it (dev profile); a release build, when there is one, is as good
    # (cargo rebuilds either when the source changed)
    profile = ["--release"] if (ROOT / "target" / "release" / "examples" / "rank_set").exists() else []
    subprocess.run([cargo, "run", "--quiet", *profile, "--example", "rank_set", "--", str(out),
                    str(RANKS), str(STRAGGLER), str(GAP_US)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    assert len(list(out.glob("rank-*.json"))) == RANKS
    return out


@pytest.fixture(scope="module")
def local(rank_set: Path) -> dict[str, Any]:
    """`tensight analyze DIR --format json`, and its wall time printed."""
    t0 = time.monotonic()
    r = run("analyze", rank_set, "--format", "json")
    print(f"local analyze of {RANKS} ranks: {time.monotonic() - t0:.2f} s")
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    report: dict[str, Any] = json.loads(r.stdout)
    # the planted straggler is what the job shows: the test can fail
    assert report["ranks"]["slowest_rank"] == STRAGGLER
    assert report["ranks"]["world_size"] == RANKS
    assert report["diagnosis"]["bottlenecks"][0]["code"] == "P001"
    return report


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    ray = pytest.importorskip("ray", reason="the Ray path's tests need Ray (pip install 'tensight[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_the_ray_path_gives_the_local_findings_on_64_ranks(
        rank_set: Path, local: dict[str, Any], ray_cluster: Any) -> None:
    from tensight.distributed import analyze_ranks_on_ray

    t0 = time.monotonic()
    report = analyze_ranks_on_ray([rank_set])
    print(f"Ray path of {RANKS} ranks (cluster up): {time.monotonic() - t0:.2f} s")
    assert_same_cross_rank_report(report, local)
    assert report["ranks"]["slowest_rank"] == STRAGGLER
    assert [p["rank"] for p in report["ranks"]["per_rank"]] == list(range(RANKS))


def test_merge_ray_on_a_cluster_by_address_with_shared_summaries(
        rank_set: Path, local: dict[str, Any], ray_cluster: Any, tmp_path: Path) -> None:
    """`tensight merge --ray --ray-address ADDR --summaries-dir DIR`: the workers write the
    summaries there, and a plain `merge` of them gives the same report."""
    address = ray_cluster.get_runtime_context().gcs_address
    shared = tmp_path / "summaries"
    r = run("merge", "--ray", "--ray-address", address, "--summaries-dir", shared,
            rank_set, "--format", "json")
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_same_cross_rank_report(json.loads(r.stdout), local)
    kept = sorted(shared.iterdir(), key=lambda p: int(p.stem.split("-")[1]))
    assert [p.name for p in kept] == [f"rank-{n}.parquet" for n in range(RANKS)]
    merged = run("merge", *kept, "--format", "json")
    assert merged.returncode == 0, merged.stderr
    assert_same_cross_rank_report(json.loads(merged.stdout), local)
    # the text report names the straggler like analyze DIR's
    text = run("merge", "--ray", "--ray-address", address, rank_set, "--width", "100")
    assert text.returncode == 0, text.stderr
    plain = run("merge", *kept, "--width", "100").stdout
    body = f"ranks  {RANKS} read of world size {RANKS}"
    assert body in text.stdout, text.stdout  # the same report below the input's name
    assert text.stdout.split(body, 1)[1] == plain.split(body, 1)[1]
    assert "GPU PERFORMANCE DIAGNOSIS REPORT · RANKS" in text.stdout


def test_a_rank_that_cannot_be_read_is_left_out_with_a_warning(
        rank_set: Path, ray_cluster: Any, tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for n in range(3):
        shutil.copy(rank_set / f"rank-{n}.json", job)
    (job / "rank-3.json").write_text('{"traceEvents": [')
    r = run("merge", "--ray", "--ray-address", ray_cluster.get_runtime_context().gcs_address,
            job, "--format", "json")
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert f"warning: {job / 'rank-3.json'} left out: " in r.stderr, r.stderr
    assert [p["rank"] for p in json.loads(r.stdout)["ranks"]["per_rank"]] == [0, 1, 2]


def test_too_few_ranks_is_one_error(ray_cluster: Any, tmp_path: Path) -> None:
    r = run("merge", "--ray", "--ray-address", ray_cluster.get_runtime_context().gcs_address,
            tmp_path / "nothing-here", tmp_path / "nor-here")
    assert_user_error(r, "failed to merge: 0 rank(s) summarized of 2 input(s)", "nothing-here")


def test_without_ray_the_error_says_how_to_install_it(rank_set: Path, tmp_path: Path) -> None:
    """A Python where `import ray` fails: one error line and the pip hint, no traceback."""
    fake = tmp_path / "no-ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named \'ray\'")\n')
    env = {"PYTHONPATH": str(fake.parent)}
    r = run("merge", "--ray", rank_set, env=env)
    assert_user_error(r, "needs Ray")
    assert r.stderr.splitlines()[1] == "hint: pip install 'tensight[ray]'", r.stderr
    module = subprocess.run([sys.executable, "-m", "tensight.distributed", str(rank_set)],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, **env})
    assert_user_error(module, "needs Ray")
    assert module.stderr.splitlines()[1] == "hint: pip install 'tensight[ray]'", module.stderr


def test_merge_ray_help_teaches() -> None:
    r = run("merge", "--help")
    assert r.returncode == 0
    for needle in ("--ray", "--ray-address", "--summaries-dir", "tensight[ray]", "merge --ray"):
        assert needle in r.stdout, r.stdout
