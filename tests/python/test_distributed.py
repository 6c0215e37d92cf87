"""`tensight run -- torchrun ...`: a distributed job records every rank into one bundle.

programs/ddp_cpu.py is a small DDP training job (gloo, on CPU) that torchrun starts as
2 (or 4) ranks; `--straggler` makes rank 1 do ~25 ms of extra host work per step. Each
job runs under `tensight run` with a timeout (a hang fails the test): the bundle must
hold `rank{N}/` per rank, each an ordinary bundle whose manifest names its rank, all
recording the same steps, and the job's manifest (`"kind": "ranks"`), written by `run`.
The launcher (torchrun's agent) records nothing. The rank-detection helpers
(tensight.ranks) are tested directly too.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import TENSIGHT, assert_full_report, assert_no_crash, run

pytest.importorskip("torch", reason="the distributed tests need torch (pip install torch)")

import torch.distributed as dist  # noqa: E402

from tensight import ranks  # noqa: E402
from tensight.bundle import FORMAT_VERSION, Distributed  # noqa: E402

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

PROGRAM = Path(__file__).resolve().parent / "programs" / "ddp_cpu.py"
#: A job that takes longer hangs (2 or 4 ranks: 15-45 s on a loaded 2-core machine).
JOB_TIMEOUT = 240
STEPS, WARMUP = 3, 2


def _torchrun() -> list[str] | None:
    """The `torchrun` console script beside this interpreter, else on PATH."""
    here = Path(sys.executable).parent / "torchrun"
    found = str(here) if here.exists() else shutil.which("torchrun")
    return [found] if found else None


def _job(out: Path, launcher: list[str], nproc: int, *args: str,
         run_args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess[str], float]:
    """`tensight run --steps 3 --warmup 2 --out OUT RUN_ARGS -- LAUNCHER --standalone
    --nproc-per-node N ddp_cpu.py ARGS`, and its wall time in seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSIGHT_")}
    env["PYTHONWARNINGS"] = "ignore"
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [TENSIGHT, "run", "--steps", str(STEPS), "--warmup", str(WARMUP), "--out", str(out),
           *run_args, "--", *launcher, "--standalone", "--nproc-per-node", str(nproc),
           str(PROGRAM), *args]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT,
                       check=False)
    return r, time.monotonic() - t0


def _manifest(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text())
    return data


def _profiler_steps(bundle: Path) -> list[str]:
    with gzip.open(bundle / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def _all_reduce_ms(bundle: Path) -> float:
    """Time in gloo's all-reduce (its `gloo:all_reduce` ranges) over the timed steps, ms."""
    with gzip.open(bundle / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    return sum(float(e.get("dur", 0)) for e in events
               if e.get("ph") == "X" and e.get("name") == "gloo:all_reduce") / 1e3


def assert_job(out: Path, r: subprocess.CompletedProcess[str], nproc: int) -> list[dict[str, Any]]:
    """The layout of a completed job's bundle; returns the ranks' manifests."""
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert "ddp: done 14" in r.stdout.splitlines(), r.stdout  # the program's own output
    top = _manifest(out)
    assert (top["format"], top["format_version"], top["kind"]) == \
        ("tensight-bundle", FORMAT_VERSION, "ranks")
    assert top["world_size"] == nproc
    assert [(e["rank"], e["dir"], e["status"], e["exit_code"]) for e in top["ranks"]] == \
        [(n, f"rank{n}", "completed", 0) for n in range(nproc)], top["ranks"]
    assert top["program"] == {"status": "completed", "exit_code": 0, "error": None}
    assert str(PROGRAM) in top["command"] and top["cwd"] == os.getcwd()
    # the launcher recorded nothing: only the ranks' folders, the job's manifest and the
    # cross-rank reports
    assert sorted(p.name for p in out.iterdir()) == \
        ["manifest.json", *sorted(f"rank{n}" for n in range(nproc)),
         "report.html", "report.json", "report.txt"]
    manifests = []
    for n in range(nproc):
        m = _manifest(out / f"rank{n}")
        assert m["distributed"] == {"rank": n, "local_rank": n, "world_size": nproc,
                                    "backend": "gloo"}, m["distributed"]
        assert m["program"] == {"status": "completed", "exit_code": 0, "error": None}
        assert m["step_detection"] == "optimizer", r.stderr
        assert (m["warmup_steps"], m["steps_recorded"]) == (WARMUP, STEPS), r.stderr
        assert m["files"]["trace"] == "trace.json.gz" and m["files"]["detail"] == "detail.json.gz"
        manifests.append(m)
    # the same step indices on every rank
    windows = {(m["first_step_index"], m["warmup_steps"], m["steps_recorded"], m["detail_step"])
               for m in manifests}
    assert len(windows) == 1, windows
    assert len({tuple(e["iterations"]) for e in top["ranks"]}) == 1, top["ranks"]
    steps = [_profiler_steps(out / f"rank{n}") for n in range(nproc)]
    assert steps == [[f"ProfilerStep#{k}" for k in range(1, STEPS + 1)]] * nproc
    warnings = [line for line in r.stderr.splitlines()
                if line.startswith("warning:") and not line.startswith("warning: no hardware pass")]
    assert warnings == [], r.stderr  # no rank's steps differ
    # run reported the cross-rank analysis; each rank's own reports are in its folder
    assert "GPU PERFORMANCE DIAGNOSIS REPORT · RANKS" in r.stdout, r.stdout
    for n in range(nproc):
        assert_full_report((out / f"rank{n}" / "report.txt").read_text())
    assert (out / "report.txt").is_file() and (out / "report.html").is_file()
    job = json.loads((out / "report.json").read_text())
    assert job["ranks"]["world_size"] == nproc, job["ranks"]
    assert f"cross-rank report {out / 'report.txt'}" in r.stderr, r.stderr
    return manifests


@pytest.fixture(scope="module")
def straggler_job(
        tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str], float]:
    launcher = _torchrun()
    if launcher is None:
        pytest.skip("no torchrun command")
    out = tmp_path_factory.mktemp("ddp") / "bundle"
    r, wall = _job(out, launcher, 2, "--straggler")
    return out, r, wall


def test_torchrun_records_every_rank_with_a_straggler(
        straggler_job: tuple[Path, Any, float]) -> None:
    out, r, wall = straggler_job
    print(f"2-rank torchrun job under tensight run: {wall:.1f} s")
    manifests = assert_job(out, r, 2)
    # The all-reduce in backward couples the ranks: rank 1's extra ~25 ms per step is
    # every rank's step time (each waits for the slowest).
    for m in manifests:
        profiled = sorted(m["timing"]["step_ms_profiled"])
        assert profiled[len(profiled) // 2] >= 20.0, (m["distributed"], m["timing"])
    # ... and the traces show where: rank 0 waits in the all-reduce for rank 1 (a
    # difference, not a ratio: a loaded machine stretches both ranks' all-reduces)
    waits = [_all_reduce_ms(out / f"rank{n}") for n in (0, 1)]
    assert waits[0] - waits[1] >= STEPS * 15.0, waits
    # The cross-rank report names the straggler, and the function where its extra time
    # goes (gloo's all-reduce runs on the host: its waiting is told from own work by
    # its `gloo:` ranges; the function comes from the detail step's stacks).
    job = json.loads((out / "report.json").read_text())
    primary = job["diagnosis"]["bottlenecks"][0]
    assert primary["code"] == "P001", primary
    assert primary["title"].startswith("Rank 1 is the straggler"), primary
    assert "host_work" in primary["message"], primary["message"]
    assert any("host_work" in (loc.get("source") or "") for loc in primary["locations"]), primary
    assert 15.0 <= primary["saving_ms"] <= 40.0, primary["saving_ms"]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_bundle_reads_alone(straggler_job: tuple[Path, Any, float], rank: int) -> None:
    """`tensight analyze BUNDLE/rankN`: a rank's bundle (with `distributed`) is an
    ordinary bundle, and its manifest round-trips through the engine's typed one."""
    from tensight import _native

    out, _, _ = straggler_job
    bundle = out / f"rank{rank}"
    r = run("analyze", bundle, "--format", "json")
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["diagnosis"] is not None
    text = run("analyze", bundle)
    assert text.returncode == 0 and f"rank {rank} of 2 (gloo)" in text.stdout, text.stdout
    assert_full_report(text.stdout)
    read = json.loads(_native.read_manifest(str(bundle / "manifest.json")))
    written = _manifest(bundle)
    assert read["unknown"] == []
    assert {k: read["manifest"][k] for k in written} == written


def test_python_m_torch_distributed_run(tmp_path: Path) -> None:
    """The launcher as a module; --hardware is skipped for a job, with a warning (the
    Nsight Compute pass would need a GPU anyway: it must not even be tried)."""
    out = tmp_path / "bundle"
    r, wall = _job(out, [sys.executable, "-m", "torch.distributed.run"], 2,
                   run_args=("--hardware",))
    print(f"2-rank python -m torch.distributed.run job: {wall:.1f} s")
    assert_job(out, r, 2)
    assert "warning: no hardware pass: --hardware does not run for a distributed job" in r.stderr
    for n in (0, 1):
        m = _manifest(out / f"rank{n}")
        assert m["hardware"] is None and m["files"]["ncu"] is None


def test_four_ranks(tmp_path: Path) -> None:
    launcher = _torchrun()
    if launcher is None:
        pytest.skip("no torchrun command")
    out = tmp_path / "bundle"
    r, wall = _job(out, launcher, 4, "--straggler")
    print(f"4-rank torchrun job: {wall:.1f} s")
    assert_job(out, r, 4)


@pytest.mark.parametrize("rank0", ["gloo", "sigterm"])
def test_a_crashed_rank_leaves_every_bundle_finished(tmp_path: Path, rank0: str) -> None:
    """Rank 1 raises at the start of iteration 4 (0-based; the second timed step). Rank 0
    then fails its all-reduce (gloo: the peer closed the connection) or, waiting in
    Python at that step, is ended by torchrun's SIGTERM. Both bundles are finished as far
    as they got, the job's manifest says how each rank ended, and the exit code is
    torchrun's."""
    out = tmp_path / "bundle"
    hang = ["--hang-rank", "0"] if rank0 == "sigterm" else []
    r, _ = _job(out, [sys.executable, "-m", "torch.distributed.run"], 2,
                "--crash-rank", "1", "--crash-step", "5", *hang)
    assert_no_crash_in_tensight(r)
    assert r.returncode != 0, r.stderr
    top = _manifest(out)
    assert top["kind"] == "ranks" and top["world_size"] == 2
    assert top["program"]["status"] == "crashed" and top["program"]["exit_code"] == r.returncode
    statuses = {e["rank"]: e for e in top["ranks"]}
    assert statuses[1]["status"] == "crashed", top["ranks"]
    assert "rank 1 crashed at step 5" in (statuses[1]["error"] or ""), top["ranks"]
    assert statuses[0]["status"] == "crashed", top["ranks"]
    if rank0 == "sigterm":
        assert (statuses[0]["exit_code"], statuses[0]["error"]) == (143, "killed by SIGTERM")
    else:  # the SIGTERM may still come first, while gloo's error unwinds
        err = statuses[0]["error"] or ""
        assert "Connection closed" in err or err == "killed by SIGTERM", top["ranks"]
    for n in (0, 1):
        m = _manifest(out / f"rank{n}")
        assert m["program"]["status"] == "crashed" and m["distributed"]["rank"] == n
        assert (out / f"rank{n}" / "trace.json.gz").is_file(), m
        assert m["files"]["trace"] == "trace.json.gz" and m["steps_recorded"] == 1, m
    assert f"job bundle {out}" in r.stderr, r.stderr


def test_ranks_that_find_steps_differently_are_named(tmp_path: Path) -> None:
    """Not SPMD: rank 0 steps an optimizer, rank 1 only calls the model (in a loop). Each rank's
    manifest says how it found its steps, and `run` warns."""
    out = tmp_path / "bundle"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSIGHT_")}
    r = subprocess.run([TENSIGHT, "run", "--steps", str(STEPS), "--warmup", str(WARMUP),
                        "--out", str(out), "--", sys.executable, "-m", "torch.distributed.run",
                        "--standalone", "--nproc-per-node", "2",
                        str(PROGRAM.with_name("ranks_differ.py"))],
                       capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT, check=False)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    detection = [_manifest(out / f"rank{n}")["step_detection"] for n in (0, 1)]
    # rank 1: its model calls, or (chosen over them) the loop around them
    assert detection[0] == "optimizer" and detection[1] in ("forward", "loop"), r.stderr
    top = _manifest(out)
    assert [e["step_detection"] for e in top["ranks"]] == detection
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: rank 1 ")]
    assert len(warned) == 1 and "the ranks' steps do not line up" in warned[0], r.stderr
    assert f"recorded {detection[1]} steps" in warned[0], warned
    assert "but rank 0 recorded optimizer steps" in warned[0], warned


def assert_no_crash_in_tensight(r: subprocess.CompletedProcess[str]) -> None:
    """No panic from tensight (the program's own traceback is expected here)."""
    assert "panicked" not in r.stderr and "RUST_BACKTRACE" not in r.stderr, r.stderr


def test_out_must_be_new_or_empty_for_a_job(tmp_path: Path) -> None:
    out = tmp_path / "full"
    out.mkdir()
    (out / "x").write_text("x")
    r = subprocess.run([TENSIGHT, "run", "--out", str(out), "--", sys.executable, "-m",
                        "torch.distributed.run", "--nproc-per-node", "2", str(PROGRAM)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "the folder is not empty" in r.stderr, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["x"]


# ---- tensight.ranks ------------------------------------------------------------------

PY = "/usr/bin/python3"


@pytest.mark.parametrize(("argv", "env", "launcher"), [
    ([PY, "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"], {}, True),
    ([PY, "-u", "-m", "torch.distributed.run", "--standalone", "train.py"], {}, True),
    ([PY, "-X", "faulthandler", "-m", "torch.distributed.launch", "t.py"], {}, True),
    ([PY, "-mtorch.distributed.run", "t.py"], {}, True),
    # a rank (torchrun sets RANK), plain programs, a program named like a launcher's arg
    ([PY, "-u", "train.py", "--lr", "1"], {"RANK": "0"}, False),
    ([PY, "/venv/bin/torchrun", "train.py"], {"RANK": "1"}, False),
    ([PY, "train.py", "torchrun"], {}, False),
    ([PY, "-c", "import torch.distributed.run"], {}, False),
    ([PY, "-m", "torch.utils.bottleneck", "t.py"], {}, False),
    ([PY], {}, False),
])
def test_the_launcher_is_told_apart(argv: list[str], env: dict[str, str], launcher: bool) -> None:
    assert ranks.is_launcher(argv, env) is launcher


def test_a_rank_from_the_environment() -> None:
    assert ranks.from_env({}) is None
    assert ranks.from_env({"RANK": "x"}) is None
    got = ranks.from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert got == Distributed(rank=3, local_rank=1, world_size=4, backend=None)
    assert ranks.rank_dir("/b", got) == Path("/b/rank3")
    # torch.distributed not initialised here: the environment's word stands
    assert ranks.with_backend(got) == got
