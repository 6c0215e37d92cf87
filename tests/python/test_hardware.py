"""`tensight run --hardware`: the second run under Nsight Compute, with a fake `ncu`
(tests/python/programs/fake_ncu.py; no GPU here) and the real collector on CPU torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import TENSIGHT, assert_full_report, assert_no_crash
from test_collect import PROGRAMS, collected

FAKE_NCU = PROGRAMS / "fake_ncu.py"
# The metrics read by crates/tensight/src/read/ncu.rs.
ENGINE_METRICS = (
    "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "lts__t_sector_hit_rate.pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_active_per_issue_active.ratio",
    "launch__registers_per_thread", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
)
SKIPPED = "hardware pass skipped: ncu not found (install Nsight Compute or set TENSIGHT_NCU)"


def tensight_run(tmp: Path, *args: str, env: dict[str, str] | None = None,
                 iterations: int = 40) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp / "bundle"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TENSIGHT_", "FAKE_NCU"))}
    full["PYTHONWARNINGS"] = "ignore"
    full.update(env or {})
    r = subprocess.run([TENSIGHT, "run", "--steps", "2", "--warmup", "1", "--out", str(out),
                        *args, "--", sys.executable, str(PROGRAMS / "train_cpu.py"),
                        str(iterations)],
                       capture_output=True, text=True, env=full, timeout=300, check=False)
    assert_no_crash(r)
    return r, out


def manifest(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    return data


def hardware_step(bundle: Path, step: int, *args: str, repeats: bool = True
                  ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The collector's second run for step `step` of `nvtx_probe.py ARGS` (as under ncu),
    stopped after it, and what it wrote in ncu_range.json."""
    extra = {"TENSIGHT_HARDWARE": "1", "TENSIGHT_HARDWARE_STEP": str(step)}
    if repeats:
        extra["TENSIGHT_HARDWARE_REPEATS"] = "skip"
    r = collected(bundle, "nvtx_probe.py", *args, stop=True, extra=extra)
    mark_file = bundle / "ncu_range.json"
    mark: dict[str, Any] = json.loads(mark_file.read_text(encoding="utf-8")) if mark_file.exists() else {}
    return r, mark


def test_hardware_pass_runs_the_program_under_ncu(tmp_path: Path) -> None:
    args_file = tmp_path / "ncu_args.json"
    r, bundle = tensight_run(tmp_path, "--hardware", "--stop",
                             env={"TENSIGHT_NCU": str(FAKE_NCU), "FAKE_NCU_ARGS": str(args_file)})
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert r.stdout.count("train: start") == 1, "the second run's output goes to ncu.log"
    argv: list[str] = json.loads(args_file.read_text(encoding="utf-8"))
    opts = argv[:argv.index("--")]
    pairs = {opts[i]: opts[i + 1] for i in range(len(opts) - 1)}
    assert pairs["--clock-control"] == "none"
    assert pairs["--nvtx-include"] == "tensight_step" and "--nvtx" in opts
    assert "--filter-mode" not in opts and "--launch-count" not in opts
    assert pairs["--nvtx-exclude"] == "tensight_repeat/"  # op calls marked as repeats
    assert pairs["--page"] == "raw" and "--csv" in opts
    assert set(ENGINE_METRICS) <= set(pairs["--metrics"].split(","))
    assert pairs["--log-file"] == str((bundle / "ncu.csv").resolve())
    # ncu starts `env K=V... CMD`: the collector's variables survive ncu's launcher.
    target = argv[argv.index("--") + 1:]
    assert os.path.basename(target[0]) == "env"
    assigned = dict(a.split("=", 1) for a in target[1:] if "=" in a and not a.startswith("/"))
    assert assigned["TENSIGHT_HARDWARE"] == "1" and "TENSIGHT_BUNDLE" in assigned and "PYTHONPATH" in assigned
    assert assigned["TENSIGHT_HARDWARE_REPEATS"] == "skip"
    assert target[-3:] == [sys.executable, str(PROGRAMS / "train_cpu.py"), "40"]
    m = manifest(bundle)
    hw = m["hardware"]
    assert hw["status"] == "recorded" and hw["reason"] is None, hw
    assert hw["step"] == 2 and hw["kernels"] == 4, hw  # W=1: the step after the warm-up
    assert hw["ncu_version"] == "Version 2099.1.0.0 (fake)"
    assert isinstance(hw["wall_s"], float)
    assert hw["launches"] == "repeated op calls skipped", hw
    assert 0 < hw["op_repeats"] < hw["op_calls"], hw
    assert m["files"]["ncu"] == "ncu.csv.gz" and m["options"]["hardware"] is True
    assert m["files"]["trace"] == "trace.json.gz"  # the first run's bundle is intact
    assert (bundle / "ncu.csv.gz").is_file() and not (bundle / "ncu.csv").exists()
    assert not (bundle / "ncu_range.json").exists()
    log = (bundle / "ncu.log").read_text(encoding="utf-8")
    assert "train: start" in log and "train: done" not in log, log  # --stop after step 2
    assert "optimizer step 2 wrapped in NVTX range tensight_step" in log, log
    assert "tensight: hardware: recorded for step 2 (4 kernels" in r.stderr, r.stderr
    assert (f"{hw['op_repeats']} of {hw['op_calls']} op calls repeated an earlier one and were "
            "not profiled") in r.stderr, r.stderr


def test_every_launch_profiles_repeats_too(tmp_path: Path) -> None:
    args_file = tmp_path / "ncu_args.json"
    r, bundle = tensight_run(tmp_path, "--hardware", "--hardware-every-launch", "--stop",
                             iterations=8,
                             env={"TENSIGHT_NCU": str(FAKE_NCU), "FAKE_NCU_ARGS": str(args_file)})
    assert r.returncode == 0, r.stderr
    argv: list[str] = json.loads(args_file.read_text(encoding="utf-8"))
    assert "--nvtx-exclude" not in argv[:argv.index("--")]
    assert "TENSIGHT_HARDWARE_REPEATS=profile" in argv[argv.index("--"):]
    hw = manifest(bundle)["hardware"]
    assert hw["status"] == "recorded" and hw["launches"] == "every", hw
    assert hw["op_calls"] is None and hw["op_repeats"] is None, hw


def test_missing_ncu_is_a_note_and_the_run_succeeds(tmp_path: Path) -> None:
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    r, bundle = tensight_run(tmp_path, "--hardware", env={"PATH": path}, iterations=8)
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    assert r.stderr.count(SKIPPED) == 1, r.stderr
    hw = manifest(bundle)["hardware"]
    assert hw["status"] == "skipped" and "ncu not found" in hw["reason"], hw
    assert manifest(bundle)["files"]["ncu"] is None
    assert not (bundle / "ncu.log").exists()


def test_failing_ncu_is_recorded_with_its_reason(tmp_path: Path) -> None:
    r, bundle = tensight_run(tmp_path, "--hardware", iterations=8,
                             env={"TENSIGHT_NCU": str(FAKE_NCU), "FAKE_NCU_FAIL": "1"})
    assert r.returncode == 0, r.stderr
    assert_full_report(r.stdout)
    hw = manifest(bundle)["hardware"]
    assert hw["status"] == "failed" and "ERR_NVGPUCTRPERM" in hw["reason"], hw
    assert "permission" in hw["reason"]
    assert manifest(bundle)["files"]["ncu"] is None
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("warning: hardware pass failed")]


def test_a_step_after_the_end_fails_with_a_hint(tmp_path: Path) -> None:
    r, bundle = tensight_run(tmp_path, "--hardware", "--hardware-step", "50", iterations=8,
                             env={"TENSIGHT_NCU": str(FAKE_NCU)})
    assert r.returncode == 0, r.stderr
    hw = manifest(bundle)["hardware"]
    assert hw["status"] == "failed" and hw["step"] == 50, hw
    assert "ended after 8 optimizer steps, before step 50" in hw["reason"], hw


def test_the_collector_wraps_step_k_in_an_nvtx_range(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    r, mark = hardware_step(bundle, 4, "10", repeats=False)
    assert r.returncode == 0, r.stderr
    nvtx = [ln for ln in r.stderr.splitlines() if ln.startswith("nvtx ")]
    # started at the end of step 3 (boundary 3), ended at the end of step 4: a start/end
    # range (process-wide, so the autograd threads' kernels are inside), not push/pop
    assert nvtx == ["nvtx start tensight_step at 3", "nvtx end 7 at 4"], r.stderr
    assert "train: done" not in r.stdout  # --stop
    assert sorted(p.name for p in bundle.iterdir()) == ["ncu_range.json"]  # no profile
    assert mark == {"step": 4, "range": "closed", "detection": "optimizer", "steps_seen": 4,
                    "program": "completed", "op_calls": None, "op_repeats": None,
                    "repeats_note": None}
    assert not [ln for ln in nvtx if ln.startswith("nvtx push")]


def test_repeated_op_calls_of_step_k_are_marked(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    r, mark = hardware_step(bundle, 4, "10")
    assert r.returncode == 0, r.stderr
    nvtx = [ln for ln in r.stderr.splitlines() if ln.startswith("nvtx ")]
    # One probe (does this build have NVTX?) before the step's range opens, outside it.
    assert nvtx[:3] == ["nvtx push tensight_repeat at 3", "nvtx pop at 3",
                        "nvtx start tensight_step at 3"], nvtx
    nvtx = nvtx[2:]
    # The second Linear(8, 8) + ReLU repeat the first's calls, forward and backward.
    pushes = [ln for ln in nvtx if ln.startswith("nvtx push")]
    assert mark["op_repeats"] == len(pushes) and mark["op_repeats"] >= 4, (mark, nvtx)
    assert mark["op_calls"] > mark["op_repeats"], mark
    # Only inside step 4's range, each push popped.
    assert set(pushes) == {"nvtx push tensight_repeat at 4"}, nvtx
    assert nvtx.count("nvtx pop at 4") == len(pushes), nvtx
    assert nvtx[0] == "nvtx start tensight_step at 3" and nvtx[-1] == "nvtx end 7 at 4", nvtx
    assert f"{mark['op_repeats']} of {mark['op_calls']} op calls repeat an earlier one" in r.stderr


def test_compiled_programs_are_profiled_at_every_launch(tmp_path: Path) -> None:
    # A dispatch mode would change what compiled code runs: the marker stays out.
    bundle = tmp_path / "b"
    r, mark = hardware_step(bundle, 4, "8", "compile")
    if "torch.compile" in r.stderr and "not supported" in r.stderr:
        pytest.skip("torch.compile is not supported on this Python")
    assert r.returncode == 0, r.stderr
    assert mark["range"] == "closed", mark
    assert mark["repeats_note"] == "torch.compile ran: every launch profiled", mark
    assert mark["op_calls"] is None and "nvtx push" not in r.stderr, (mark, r.stderr)
    assert "hardware pass: torch.compile ran: every launch profiled" in r.stderr


def test_no_marker_for_step_1_or_under_the_programs_own_dispatch_mode(tmp_path: Path) -> None:
    # Step 1 compiles and autotunes: a dispatch mode would make torch.compile run eagerly.
    b1 = tmp_path / "b1"
    r, mark = hardware_step(b1, 1, "4")
    assert r.returncode == 0, r.stderr
    assert mark["range"] == "closed" and mark["repeats_note"] == "step 1: every launch profiled", mark
    assert mark["op_calls"] is None and "nvtx push" not in r.stderr

    # A program that runs its own dispatch mode around the loop: the marker would sit
    # on top of it and be popped by its exit, so it stays out.
    b2 = tmp_path / "b2"
    r, mark = hardware_step(b2, 3, "6", "mode")
    assert r.returncode == 0, r.stderr
    assert mark["repeats_note"] == "the program runs a dispatch mode: every launch profiled", mark
    assert mark["range"] == "closed" and mark["op_calls"] is None, mark


def test_the_hardware_pass_wraps_a_step_of_the_first_runs_loop(tmp_path: Path) -> None:
    """A program with neither optimizer nor module: the first run finds its steps as the
    iterations of a loop; the second run, told that loop, wraps one of its iterations."""
    prog = tmp_path / "bench.py"
    prog.write_text("import torch\n"
                    "x = torch.randn(64, 64)\n"
                    "setup = [torch.randn(4) for _ in range(5)]\n"
                    "for i in range(40):\n"
                    "    x = torch.tanh(x @ x.T / 64)\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TENSIGHT_", "FAKE_NCU"))}
    full["TENSIGHT_NCU"] = str(FAKE_NCU)
    out = tmp_path / "bundle"
    r = subprocess.run([TENSIGHT, "run", "--steps", "2", "--warmup", "2", "--hardware", "--out",
                        str(out), "--", sys.executable, str(prog)],
                       capture_output=True, text=True, env=full, timeout=300, check=False)
    assert_no_crash(r)
    assert r.returncode == 0, r.stderr
    m = manifest(out)
    assert m["step_detection"] == "loop" and m["step_loop"]["line"] == 4, m["step_loop"]
    assert m["hardware"]["status"] == "recorded", m["hardware"]
    assert "hardware: recorded for step 3" in r.stderr, r.stderr
