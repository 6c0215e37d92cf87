"""What a stopped profiler leaves behind: unprofiled step time after a torch.profiler
session has run and stopped, with and without CUPTI torn down (issues 11 and 12).

``tensight run`` times its warm-up steps without the profiler, but after the speculative
profile (from CUDA's first use to the first step) has run with CUDA activity. Kineto
does not finalize CUPTI when a session stops unless ``TEARDOWN_CUPTI=1``: if its
callbacks stay on every kernel launch, the "unprofiled" steps of a launch-bound program
are slower than the program alone, and so is the deflation target every saving is
restated in. Each variant runs in a fresh process, the variants interleaved REPEAT times:

    python3 scripts/h200/residual_cost.py [--repeat 3] [--out FILE] [WORKLOAD...]

Variants: ``alone`` (no profiler); ``after`` (a 3-step CPU+CUDA session at the start,
stopped, then the steps timed); ``after_teardown`` (the same with TEARDOWN_CUPTI=1);
``after_cpu`` (a CPU-only session: no CUPTI); ``run`` and ``run_teardown`` (the program
under ``tensight run --warmup 12 --steps 3 --stop``: the manifest's unprofiled warm-up
steps, CUDA events). Prints a table of medians (ms) and ratios to ``alone``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

FIRST, STEPS = 12, 40  # steps timed: FIRST..STEPS-1 (the run variants: the warm-up's)


def _launch_bound(dev: Any) -> Callable[[], None]:
    import torch

    xs = [torch.randn(64, device=dev) for _ in range(8)]

    def step() -> None:
        for _ in range(40):
            for x in xs:
                x.mul_(0.999).add_(0.001)
    return step


def _adam_like(dev: Any) -> Callable[[], None]:
    import torch

    ps = [torch.randn(256, 256, device=dev) for _ in range(60)]
    gs = [torch.randn_like(p) for p in ps]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]

    def step() -> None:
        for p, g, m, v in zip(ps, gs, ms, vs):
            m.mul_(0.9).add_(g, alpha=0.1)
            v.mul_(0.999).addcmul_(g, g, value=0.001)
            p.addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-3)
    return step


def _mlp_sgd(dev: Any) -> Callable[[], None]:
    import torch

    m = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)]).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device=dev)

    def step() -> None:
        loss = m(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


WORKLOADS = {"launch_bound": _launch_bound, "adam_like": _adam_like, "mlp_sgd": _mlp_sgd}


def worker(name: str, variant: str) -> None:
    """One process: build the workload, maybe profile 3 steps, time the rest."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    step = WORKLOADS[name](dev)
    if variant in ("after", "after_teardown", "after_cpu"):
        acts = [ProfilerActivity.CPU] + ([] if variant == "after_cpu" else [ProfilerActivity.CUDA])
        with profile(activities=acts):
            for _ in range(3):
                step()
            torch.cuda.synchronize()
    marks = []
    for i in range(STEPS):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append(e)
        step()
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    marks.append(end)
    torch.cuda.synchronize()
    ms = [marks[i].elapsed_time(marks[i + 1]) for i in range(len(marks) - 1)]
    print("RESIDUAL " + json.dumps({"median_ms": statistics.median(ms[FIRST:])}), file=sys.stderr)


def _program(name: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--worker", name, "plain"]


def one(name: str, variant: str, tmp: Path) -> float | None:
    env = dict(os.environ)
    if variant.endswith("teardown"):
        env["TEARDOWN_CUPTI"] = "1"
    if variant.startswith("run"):
        out = tmp / f"{name}-{variant}"
        cmd = [sys.executable, "-m", "tensight", "run", "--warmup", str(FIRST), "--steps", "3",
               "--stop", "--out", str(out), "--format", "json", "--", *_program(name)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        try:
            m = json.loads((out / "manifest.json").read_text())
            gpu = m["timing"]["step_ms_unprofiled_gpu"][2:]  # the first two: the warm-up's edge
            return statistics.median(gpu)
        except Exception as e:  # noqa: BLE001
            print(f"{name} {variant}: {type(e).__name__}: {e}\n{r.stderr[-800:]}", file=sys.stderr)
            return None
    r = subprocess.run(_program(name)[:-1] + [variant], env=env, capture_output=True, text=True,
                       timeout=240)
    for line in r.stderr.splitlines():
        if line.startswith("RESIDUAL "):
            return float(json.loads(line.split(" ", 1)[1])["median_ms"])
    print(f"{name} {variant} failed:\n{r.stderr[-800:]}", file=sys.stderr)
    return None


VARIANTS = ("alone", "after", "after_teardown", "after_cpu", "run", "run_teardown")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "VARIANT"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("workloads", nargs="*", default=["launch_bound", "adam_like", "mlp_sgd"])
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker)
        return 0
    got: dict[str, dict[str, list[float | None]]] = {}
    with tempfile.TemporaryDirectory() as t:
        for r in range(a.repeat):
            for name in a.workloads:
                for v in VARIANTS:
                    ms = one(name, v, Path(t) / f"r{r}")
                    got.setdefault(name, {}).setdefault(v, []).append(ms)
                    print(f"{name} {v} run {r + 1}: {ms}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(got, indent=1) + "\n")
    print("| workload | " + " | ".join(VARIANTS) + " |")
    print("| --- |" + " --- |" * len(VARIANTS))
    for name, row in got.items():
        base = [x for x in row["alone"] if x]
        b = statistics.median(base) if base else None
        cells = []
        for v in VARIANTS:
            xs = [x for x in row[v] if x]
            if not xs:
                cells.append("–")
                continue
            m = statistics.median(xs)
            each = "/".join(f"{x:.2f}" for x in xs)
            cells.append(f"{m:.2f} ms ({each})" + (f" {m / b:.2f}×" if b and v != "alone" else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
