"""The collector (`tensight run`'s Python side), the built-in bench and the Python API, on CPU.

Programs in programs/ are run the way `tensight run` runs them: the installed package's
boot dir first on PYTHONPATH, TENSIGHT_* in the environment. Each is also run without
tensight, and its stdout, stderr (less `tensight: ` lines) and exit code must match.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import TENSIGHT, assert_full_report, assert_no_crash, run

pytest.importorskip("torch", reason="the collector tests need torch (pip install torch)")

import tensight  # noqa: E402

PROGRAMS = Path(__file__).resolve().parent / "programs"
BOOT = Path(os.path.abspath(tensight.__file__)).parent / "_boot"
TIMEOUT = 300


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSIGHT_")}
    env["PYTHONWARNINGS"] = "ignore"  # torch warns about a missing numpy on some machines
    env.update(extra or {})
    return env


def plain(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a program without tensight."""
    return subprocess.run([sys.executable, str(PROGRAMS / script), *args], capture_output=True,
                          text=True, env=_env(), timeout=TIMEOUT, check=False)


def collected(bundle: Path, script: str, *args: str, steps: int = 3, warmup: int = 2,
              stop: bool = False, pythonpath: str | None = None,
              extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a program as `tensight run --steps S --warmup W [--stop] -- python ...` does."""
    bundle.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("PYTHONPATH")
    path = os.pathsep.join(p for p in (str(BOOT), pythonpath, old) if p)
    env = _env({"PYTHONPATH": path, "TENSIGHT_BUNDLE": str(bundle),
                "TENSIGHT_STEPS": str(steps), "TENSIGHT_WARMUP": str(warmup),
                "TENSIGHT_STOP": "1" if stop else "0", **(extra or {})})
    return subprocess.run([sys.executable, str(PROGRAMS / script), *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT, check=False)


def own_stderr(stderr: str) -> list[str]:
    """The program's stderr lines: without tensight's progress lines."""
    return [line for line in stderr.splitlines() if not line.startswith("tensight: ")]


def manifest(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
    return data


def trace_events(bundle: Path, name: str = "trace.json.gz") -> list[dict[str, Any]]:
    with gzip.open(bundle / name, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def profiler_steps(bundle: Path) -> list[str]:
    """The timed steps' markers (the detail step has its own file)."""
    return sorted({e["name"] for e in trace_events(bundle)
                   if str(e.get("name", "")).startswith("ProfilerStep#")})


def assert_passthrough(got: subprocess.CompletedProcess[str],
                       want: subprocess.CompletedProcess[str]) -> None:
    assert got.returncode == want.returncode, got.stderr
    assert got.stdout == want.stdout
    assert own_stderr(got.stderr) == own_stderr(want.stderr), got.stderr
    assert "Traceback" not in want.stderr or "Traceback" in got.stderr


@pytest.fixture(scope="module")
def train_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    bundle = tmp_path_factory.mktemp("train") / "bundle"
    return bundle, collected(bundle, "train_cpu.py", "12", steps=3, warmup=2)


def test_training_script_writes_a_bundle(train_bundle: tuple[Path, Any]) -> None:
    bundle, r = train_bundle
    assert r.returncode == 0, r.stderr
    m = manifest(bundle)
    assert m["format"] == "tensight-bundle" and m["format_version"] == "1.2"
    assert m["tensight_version"] == tensight.__version__
    assert m["step_detection"] == "optimizer"
    assert (m["warmup_steps"], m["steps_requested"], m["steps_recorded"]) == (2, 3, 3)
    assert m["program"] == {"status": "completed", "exit_code": 0, "error": None}
    assert m["files"] == {"trace": "trace.json.gz", "detail": "detail.json.gz",
                          "execution_trace": "et.json.gz", "ncu": None}
    lean = {"record_shapes": False, "with_stack": False, "with_modules": False,
            "profile_memory": False}
    full = {k: True for k in lean}
    assert m["options"] == {"timed": lean, "detail": full, "hardware": False}
    assert m["detail_step"] == 4 and m["step_loop"] is None
    assert m["device"] is None and m["cwd"] == os.getcwd()
    assert m["distributed"] is None  # no RANK in the environment: a single process
    assert m["command"][0].endswith("train_cpu.py") and m["command"][1:] == ["12"]
    assert len(m["timing"]["step_ms_unprofiled"]) == 1  # step 2 (step 1 has no start)
    assert len(m["timing"]["step_ms_profiled"]) == 3
    # steps 1-2 unprofiled, 3 the profiler's warm-up, 4-6 timed, 7 unprofiled, 8 detail
    assert profiler_steps(bundle) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    events = trace_events(bundle)
    assert any(str(e.get("name")).startswith("Optimizer.step#SGD") for e in events)
    # the timed steps are lean: no stacks, shapes or allocator events
    assert not any(e.get("cat") == "python_function" for e in events)
    assert not any("Input Dims" in e.get("args", {}) for e in events)
    detail = trace_events(bundle, "detail.json.gz")
    assert {e["name"] for e in detail if str(e.get("name")).startswith("ProfilerStep#")} == {
        "ProfilerStep#4"}
    assert any(e.get("cat") == "python_function" for e in detail)
    with gzip.open(bundle / "et.json.gz", "rt") as f:
        assert json.load(f)["nodes"]
    assert sorted(p.name for p in bundle.iterdir()) == ["detail.json.gz", "et.json.gz",
                                                       "manifest.json", "trace.json.gz"]
    ours = [line for line in r.stderr.splitlines() if line.startswith("tensight: ")]
    assert len(ours) == 3, r.stderr
    assert ours[0] == ("tensight: recording 3 steps (optimizer steps 4..6; "
                       "2 warm-up + 1 profiler warm-up before)")
    assert ours[1] == "tensight: recorded 3 optimizer steps and a detail step"
    assert ours[2] == f"tensight: bundle written: {bundle.resolve()}"


def test_the_bundle_is_analyzed(train_bundle: tuple[Path, Any]) -> None:
    bundle, _ = train_bundle
    r = subprocess.run([TENSIGHT, "analyze", str(bundle)], capture_output=True, text=True,
                       timeout=TIMEOUT, check=False)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert "GPU rules skipped" in r.stdout or "skipped" in r.stdout
    report = tensight.analyze(bundle)
    assert report["summary"]["steps"] == 3


def test_stdout_stderr_and_exit_code_pass_through(tmp_path: Path) -> None:
    want = plain("train_cpu.py", "12", "3")
    got = collected(tmp_path / "b", "train_cpu.py", "12", "3", steps=2, warmup=1)
    assert want.returncode == 3 and "train: done 12" in want.stdout
    assert_passthrough(got, want)
    m = manifest(tmp_path / "b")
    assert m["program"] == {"status": "crashed", "exit_code": 3, "error": "exited with code 3"}
    assert m["steps_recorded"] == 2


def test_a_crash_keeps_the_partial_recording(tmp_path: Path) -> None:
    # warm-up 1: step 1 unprofiled, 2 profiler warm-up, 3 recorded, crash inside step 4
    want = plain("crash.py", "4")
    got = collected(tmp_path / "b", "crash.py", "4", steps=3, warmup=1)
    assert want.returncode == 1 and "RuntimeError: planted crash at iteration 4" in want.stderr
    assert_passthrough(got, want)
    m = manifest(tmp_path / "b")
    assert m["program"] == {"status": "crashed", "exit_code": 1,
                            "error": "RuntimeError: planted crash at iteration 4"}
    assert m["step_detection"] == "optimizer" and m["steps_recorded"] == 1
    # the execution trace is recorded in the step after the timed ones: never reached
    assert m["files"]["trace"] == "trace.json.gz" and m["files"]["execution_trace"] is None
    assert "ProfilerStep#2" in profiler_steps(tmp_path / "b")


def test_a_crash_before_any_step_keeps_the_whole_program(tmp_path: Path) -> None:
    want = plain("crash.py", "1")
    got = collected(tmp_path / "b", "crash.py", "1")
    assert_passthrough(got, want)
    m = manifest(tmp_path / "b")
    assert m["program"]["status"] == "crashed" and m["program"]["exit_code"] == 1
    assert m["step_detection"] == "whole_program" and m["steps_recorded"] == 0
    assert (tmp_path / "b" / "trace.json.gz").exists()


def test_a_program_without_torch_is_untouched(tmp_path: Path) -> None:
    want = plain("no_torch.py")
    got = collected(tmp_path / "b", "no_torch.py")
    assert_passthrough(got, want)
    assert got.stdout.splitlines()[-1] == "modules: False False"
    assert got.stderr == ""
    assert list((tmp_path / "b").iterdir()) == []


def test_dataloader_workers_still_work(tmp_path: Path) -> None:
    want = plain("dataloader.py", "14")
    got = collected(tmp_path / "b", "dataloader.py", "14", steps=3, warmup=2)
    assert_passthrough(got, want)
    assert got.stdout.strip() == "dataloader: 14 batches"
    m = manifest(tmp_path / "b")
    assert m["step_detection"] == "optimizer" and m["steps_recorded"] == 3
    assert m["program"]["status"] == "completed"


def test_the_window_waits_for_a_dataloaders_prefetch_to_drain(tmp_path: Path) -> None:
    # The first 4 steps take prefetched batches at once; in steady state each waits
    # ~15 ms for the workers. A window among the prefetched steps would show no waiting.
    got = collected(tmp_path / "b", "slow_loader.py", "24", steps=3, warmup=2)
    assert_passthrough(got, plain("slow_loader.py", "24"))
    assert "warm-up goes on while the DataLoader hands out the" in got.stderr, got.stderr
    m = manifest(tmp_path / "b")
    assert m["steps_recorded"] == 3 and m["program"]["status"] == "completed"
    assert m["warmup_steps"] >= 4, m["warmup_steps"]  # 2 asked, then the prefetch drained
    # The two workers deliver in pairs (one step waits ~30 ms, the next none): the mean is
    # ~15 ms in steady state, ~1 ms on prefetched batches.
    profiled = m["timing"]["step_ms_profiled"]
    assert sum(profiled) / len(profiled) > 5.0, m["timing"]


@pytest.mark.parametrize("mode, recorded", [("term-early", 0), ("term-window", 2)])
def test_sigterm_still_leaves_a_finished_bundle(tmp_path: Path, mode: str, recorded: int) -> None:
    got = collected(tmp_path / "b", "killed.py", mode, steps=3, warmup=2)
    assert got.returncode == -signal.SIGTERM, got.stderr  # it still dies of the signal
    m = manifest(tmp_path / "b")
    assert m["program"]["status"] == "crashed", m["program"]
    assert m["program"]["error"] == "killed by SIGTERM" and m["program"]["exit_code"] == 143
    assert (tmp_path / "b" / "trace.json.gz").is_file()  # the whole program, or the window
    assert m["steps_recorded"] == recorded, m  # term-window: killed as timed step 3 began
    r = run("analyze", tmp_path / "b")
    assert r.returncode == 0 and "killed by SIGTERM" in r.stdout, r.stdout + r.stderr


def test_sigterm_while_the_bundle_is_written_waits_for_it(tmp_path: Path) -> None:
    # warm-up 2: steps 1-2 unprofiled, 3 the profiler's warm-up, 4-5 recorded, crash in 6
    got = collected(tmp_path / "b", "term_while_finishing.py", steps=3, warmup=2)
    assert got.returncode == -signal.SIGTERM, got.stderr  # it still dies of the signal
    m = manifest(tmp_path / "b")
    assert m["program"] == {"status": "crashed", "exit_code": 1,
                            "error": "RuntimeError: planted crash at step 6"}, m["program"]
    assert m["steps_recorded"] == 2 and m["files"]["trace"] == "trace.json.gz", m
    assert "ProfilerStep#2" in profiler_steps(tmp_path / "b")


def test_out_of_memory_under_the_profiler_is_named(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "killed.py", "oom", steps=3, warmup=2)
    assert got.returncode == 1
    err = manifest(tmp_path / "b")["program"]["error"]
    assert err.startswith("out of GPU memory while tensight's profiler recorded the window"), err
    assert "OutOfMemoryError: CUDA out of memory" in err
    assert "tensight: out of GPU memory while" in got.stderr


def test_inference_steps_are_top_level_forwards(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "infer.py", steps=3, warmup=2)
    assert_passthrough(got, plain("infer.py"))
    m = manifest(tmp_path / "b")
    assert m["step_detection"] == "forward" and m["steps_recorded"] == 3
    assert len(profiler_steps(tmp_path / "b")) == 3


def test_no_steps_records_the_whole_program(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "whole.py")
    assert_passthrough(got, plain("whole.py"))
    m = manifest(tmp_path / "b")
    assert m["step_detection"] == "whole_program" and m["steps_recorded"] == 0
    assert m["program"] == {"status": "completed", "exit_code": 0, "error": None}
    names = {e.get("name") for e in trace_events(tmp_path / "b")}
    assert "aten::tanh" in names


def _step_ops(bundle: Path) -> dict[str, list[str]]:
    """Per ProfilerStep: the names of the optimizer steps inside it."""
    events = trace_events(bundle)
    keep = set(profiler_steps(bundle))
    steps = [e for e in events if e.get("name") in keep]
    out: dict[str, list[str]] = {}
    for s in steps:
        out[s["name"]] = sorted(e["name"] for e in events
                                if str(e.get("name", "")).startswith("Optimizer.step#")
                                and s["ts"] <= e["ts"] < s["ts"] + s["dur"])
    return out


def test_several_optimizers_make_one_step_per_iteration(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "gan.py", steps=3, warmup=2)
    assert_passthrough(got, plain("gan.py"))
    assert manifest(tmp_path / "b")["steps_recorded"] == 3
    # a boundary after the generator's step (the last before the first optimizer repeats)
    assert _step_ops(tmp_path / "b") == {
        f"ProfilerStep#{k}": ["Optimizer.step#Adam.step", "Optimizer.step#SGD.step"]
        for k in (1, 2, 3)}


def test_a_program_that_profiles_itself(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "self_profile.py", steps=3, warmup=2)
    want = plain("self_profile.py")
    assert got.returncode == want.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    # Kineto's own log lines (its level is set once per process) are the only difference
    kineto = ("USDT:", "ERROR:", "INFO:", "WARNING:", "STAGE:")
    assert [x for x in own_stderr(got.stderr) if not x.startswith(kineto)] == [
        x for x in own_stderr(want.stderr) if not x.startswith(kineto)]
    assert "own profile has events: True" in got.stdout
    m = manifest(tmp_path / "b")  # the window waits for the program's profiler to end
    assert m["step_detection"] == "optimizer" and m["steps_recorded"] == 3
    assert m["warmup_steps"] >= 3


def test_cycle_learning() -> None:
    from tensight.steps import Cycle as _Cycle

    c = _Cycle()  # D, G per iteration: provisional at the first D, then after each G
    assert [c.feed(k) for k in (1, 2, 1, 2, 1, 2)] == [True, False, False, True, False, True]
    c = _Cycle()  # a setup module once, then model + head per iteration
    assert [c.feed(k) for k in (0, 1, 2, 1, 2, 1)] == [True, False, False, False, True, False]
    c = _Cycle()
    assert [c.feed(7) for _ in range(3)] == [True, True, True]


def test_execution_trace_in_the_detail_step(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "train_cpu.py", "12", steps=2, warmup=1)
    assert got.returncode == 0, got.stderr
    m = manifest(tmp_path / "b")
    assert m["steps_recorded"] == 2 and m["detail_step"] == 3
    assert len(m["timing"]["step_ms_profiled"]) == 2
    assert profiler_steps(tmp_path / "b") == ["ProfilerStep#1", "ProfilerStep#2"]
    events = trace_events(tmp_path / "b", "detail.json.gz")
    et_step = next(e for e in events if e.get("name") == "ProfilerStep#3")
    rf_ids = {e["args"]["Record function id"] for e in events
              if e.get("cat") == "cpu_op" and et_step["ts"] <= e["ts"] < et_step["ts"] + et_step["dur"]}
    with gzip.open(tmp_path / "b" / "et.json.gz", "rt") as f:
        nodes = json.load(f)["nodes"]
    et_ids = {a["value"] for n in nodes for a in n.get("attrs", []) if a["name"] == "rf_id"}
    assert rf_ids and rf_ids <= et_ids
    # the engine carries the detail step over to the timed steps
    report = tensight.analyze(tmp_path / "b")
    assert report["detail"]["step"] == "ProfilerStep#3"
    assert report["detail"]["steps_carried"] == 2 and report["detail"]["shapes"] > 0
    assert report["summary"]["steps"] == 2


def test_full_timed_steps_keep_everything_in_one_trace(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "train_cpu.py", "12", steps=2, warmup=1,
                    extra={"TENSIGHT_TIMED": "full"})
    assert got.returncode == 0, got.stderr
    m = manifest(tmp_path / "b")
    assert m["files"]["detail"] is None and m["detail_step"] is None
    assert m["options"]["timed"]["with_stack"] is True
    assert any(e.get("cat") == "python_function" for e in trace_events(tmp_path / "b"))
    assert (tmp_path / "b" / "et.json.gz").exists()


def test_stop_ends_the_program_once_recorded(tmp_path: Path) -> None:
    got = collected(tmp_path / "b", "train_cpu.py", "1000", "5", steps=2, warmup=1, stop=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout == "train: start\n"  # stopped before the end of the loop
    assert "tensight: stopping the program (--stop)" in got.stderr
    m = manifest(tmp_path / "b")
    assert m["program"] == {"status": "completed", "exit_code": 0, "error": None}
    assert m["steps_recorded"] == 2


def test_another_sitecustomize_still_runs(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import sys\nprint('other sitecustomize ran', file=sys.stderr)\n")
    got = collected(tmp_path / "b", "no_torch.py", pythonpath=str(other))
    assert got.returncode == 0
    assert got.stderr == "other sitecustomize ran\n"


def test_bench_runs_on_cpu() -> None:
    r = subprocess.run([sys.executable, "-m", "tensight.bench", "--model", "simple_cnn",
                        "--device", "cpu", "--steps", "3", "--batch-size", "4"],
                       capture_output=True, text=True, env=_env(), timeout=TIMEOUT, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "bench: simple_cnn batch 4 on cpu" in r.stderr


def test_bench_under_the_collector_stops_after_the_window(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    env = _env({"PYTHONPATH": os.pathsep.join(p for p in (str(BOOT), os.environ.get("PYTHONPATH"))
                                              if p),
                "TENSIGHT_BUNDLE": str(bundle), "TENSIGHT_STEPS": "2", "TENSIGHT_WARMUP": "1",
                "TENSIGHT_STOP": "1"})
    r = subprocess.run([sys.executable, "-m", "tensight.bench", "--model", "simple_cnn",
                        "--device", "cpu", "--steps", "2", "--warmup", "1", "--batch-size", "2"],
                       capture_output=True, text=True, env=env, timeout=TIMEOUT, check=False)
    assert r.returncode == 0, r.stderr
    assert "bench:" not in r.stderr  # stopped before its summary
    m = manifest(bundle)
    assert m["steps_recorded"] == 2 and m["program"]["status"] == "completed"


def _check_results(results: dict[str, Any]) -> None:
    assert set(results) >= {"diagnosis", "metrics", "roofline", "report", "bundle"}
    diagnosis = results["diagnosis"]
    assert isinstance(diagnosis["bottlenecks"], list)
    assert diagnosis["primary_bottleneck"] is None or isinstance(diagnosis["primary_bottleneck"],
                                                                 dict)
    if diagnosis["bottlenecks"]:
        assert diagnosis["primary_bottleneck"] == diagnosis["bottlenecks"][0]
    for key in ("step_time_ms", "gpu_busy_pct", "kernels_per_step", "steps"):
        assert key in results["metrics"], key
    assert results["report"]["diagnosis"]["bottlenecks"] == diagnosis["bottlenecks"]
    assert (Path(results["bundle"]) / "manifest.json").exists()


def test_profile_model_on_cpu(tmp_path: Path) -> None:
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    results = tensight.profile_model(model, lambda: torch.randn(8, 32), steps=3, warmup=2,
                                     optimizer=opt, out=tmp_path / "b")
    _check_results(results)
    assert results["bundle"] == str(tmp_path / "b")
    assert results["metrics"]["steps"] == 3
    m = manifest(tmp_path / "b")
    assert (m["step_detection"], m["warmup_steps"], m["steps_recorded"]) == ("optimizer", 2, 3)
    assert len(m["timing"]["step_ms_unprofiled"]) == 2

    # inference, default temp bundle
    results = tensight.profile_model(model, lambda: torch.randn(8, 32), steps=2, warmup=0,
                                     train=False)
    _check_results(results)
    assert manifest(Path(results["bundle"]))["step_detection"] == "forward"


def test_profile_context_manager(tmp_path: Path) -> None:
    import torch
    from torch import nn

    model = nn.Linear(16, 4)
    opt = torch.optim.Adam(model.parameters())
    with tensight.profile(steps=2, warmup=1, out=tmp_path / "b") as p:
        for _ in range(6):
            loss = model(torch.randn(4, 16)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert p.results is not None
    _check_results(p.results)
    assert p.results["metrics"]["steps"] == 2
    assert "GPU PERFORMANCE DIAGNOSIS REPORT" in p.report()


def _has_run_command() -> bool:
    r = subprocess.run([TENSIGHT, "run", "--help"], capture_output=True, text=True, timeout=60,
                       check=False)
    return r.returncode == 0


def test_tensight_run_end_to_end(tmp_path: Path) -> None:
    if not _has_run_command():
        pytest.skip("`tensight run` is not built yet (Rust side)")
    want = plain("train_cpu.py", "12", "3")
    r = subprocess.run([TENSIGHT, "run", "--steps", "2", "--warmup", "1", "--out",
                        str(tmp_path / "b"), "--", sys.executable, str(PROGRAMS / "train_cpu.py"),
                        "12", "3"], capture_output=True, text=True, env=_env(), timeout=TIMEOUT,
                       check=False)
    assert r.returncode == 3, r.stderr
    for line in want.stdout.splitlines():
        assert line in r.stdout.splitlines()
    m = manifest(tmp_path / "b")
    assert m["program"]["exit_code"] == 3 and m["steps_recorded"] == 2


def test_boot_hook_survives_spec_probes_and_a_python_launcher(tmp_path: Path) -> None:
    """Seen under Nsight Compute on an H200: the program is started through a Python
    launcher (which must not claim the run) and code probes torch's spec before the
    import (which must not use up the import hook)."""
    import tensight

    boot = Path(tensight.__file__).parent / "_boot"
    prog = ("import importlib.util; importlib.util.find_spec('torch'); import torch; "
            "import tensight.hardware as h; print('active', type(h._active).__name__)")
    launcher = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {prog!r}]).returncode)"
    env = {**os.environ, "TENSIGHT_BUNDLE": str(tmp_path), "TENSIGHT_HARDWARE": "1",
           "TENSIGHT_HARDWARE_STEP": "3", "PYTHONPATH": str(boot)}
    env.pop("TENSIGHT_OWNER_PID", None)
    r = subprocess.run([sys.executable, "-c", launcher], env=env, capture_output=True, text=True, timeout=300)
    assert "active HardwareCollector" in r.stdout, r.stdout + r.stderr


def test_the_manifest_round_trips_through_the_engine(train_bundle: tuple[Path, Any]) -> None:
    """The bundle contract: every field the collector writes is a field of the engine's
    typed Manifest, read back with the same value (and the other way round)."""
    import dataclasses

    from tensight import _native
    from tensight.bundle import Manifest

    bundle, _ = train_bundle
    written = manifest(bundle)
    read = json.loads(_native.read_manifest(str(bundle / "manifest.json")))
    assert read["unknown"] == []
    engine = read["manifest"]
    assert {k: engine[k] for k in written} == written
    python_fields = {f.name for f in dataclasses.fields(Manifest)}
    assert set(engine) - {"execution_trace_step"} == python_fields



@pytest.mark.parametrize(("script", "how", "line"), [
    # A recurrence unrolled in forward: its 100 iterations per call would fill the window
    # before the first forward returns.
    ("unrolled.py", "optimizer", None),
    # The comprehensions that build the inputs (tensor work in each iteration).
    ("setup_comprehension.py", "loop", 18),
    # A loop over the tensors a step updates: 200 back edges per step.
    ("per_tensor_update.py", "loop", 17),
    # Micro-batches: the model's calls are parts of a step of the loop around them.
    ("micro_batches.py", "loop", 17),
])
def test_loops_that_are_not_the_step_loop(tmp_path: Path, script: str, how: str,
                                          line: int | None) -> None:
    bundle = tmp_path / "b"
    r = collected(bundle, script, "12", steps=3, warmup=2)
    assert r.returncode == 0, r.stderr
    m = manifest(bundle)
    assert m["step_detection"] == how and m["steps_recorded"] == 3, r.stderr
    assert (m["step_loop"] or {}).get("line") == line, r.stderr
