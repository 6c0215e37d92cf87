"""What a plain ``torch.profiler`` trace's host events cost the host, per profiler option:
the calibration tensight deflates plain traces with (issue 12, "profiler inflation
modelled"). Device machine, repo root:

    python3 scripts/h200/plain_calibration.py --out FILE [--steps 12] [WORKLOAD...]

For each host-bound workload (its host, not its GPU, sets the step time, so what the
profiler adds to the host shows in the step): the host time per step without a profiler
(median of several blocks of steps, wall clock, a synchronize at both ends of a block),
then inside ``torch.profiler.profile(activities=[CPU, CUDA], ...)`` with each option set
(none, record_shapes, with_stack, both), the same way; the profiled trace is exported and
its host events inside the timed steps counted (ops, Python calls, CUDA runtime and driver
calls, as tensight's model counts them). The cost of one host event under an option is
(profiled − unprofiled host ms) / events per step; `costs_ns` is its median over the
workloads, per option (what the engine uses:
`crates/tensight/src/analysis/profiler_cost_h200.json`). Prints a table and writes JSON:
per workload and option, the step times, event counts and costs.
The workloads are this script's own (nothing of workloads/ or the hold-out sets).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

Step = Callable[[], None]


def tiny_kernels(dev: torch.device) -> Step:
    xs = [torch.randn(64, device=dev) for _ in range(8)]

    def step() -> None:
        for _ in range(30):
            for x in xs:
                x.mul_(0.999).add_(0.001)
    return step


def small_mlp_adam(dev: torch.device) -> Step:
    m = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(12)]).to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(16, 128, device=dev)

    def step() -> None:
        loss = m(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loss.item() > 1e9:
            print("diverged")
    return step


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.fc2 = torch.nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


def deep_modules(dev: torch.device) -> Step:
    m = torch.nn.Sequential(*[Block(64) for _ in range(24)]).to(dev)
    x = torch.randn(4, 64, device=dev)

    def step() -> None:
        with torch.no_grad():
            m(x)
    return step


def python_helpers(dev: torch.device) -> Step:
    w = torch.randn(32, 32, device=dev)

    def scale(t: torch.Tensor, k: float) -> torch.Tensor:
        return t * k

    def layer(t: torch.Tensor) -> torch.Tensor:
        return torch.tanh(scale(t @ w, 0.5))

    def step() -> None:
        t = torch.ones(8, 32, device=dev)
        for _ in range(60):
            t = layer(t)
    return step


def deep_stack(dev: torch.device) -> Step:
    """Ops launched 40 Python frames deep (a stack the profiler walks at every op)."""
    x = torch.randn(256, device=dev)

    def down(k: int) -> None:
        if k:
            down(k - 1)
            return
        for _ in range(40):
            x.mul_(1.0001)

    def step() -> None:
        down(40)
    return step


def lstm_loop(dev: torch.device) -> Step:
    """A Python loop over time steps of an LSTMCell, trained: thousands of small ops in
    forward and backward (the autograd engine's thread launches the backward's)."""
    cell = torch.nn.LSTMCell(64, 64).to(dev)
    opt = torch.optim.SGD(cell.parameters(), lr=1e-3)
    xs = torch.randn(32, 8, 64, device=dev)

    def step() -> None:
        h = c = torch.zeros(8, 64, device=dev)
        for t in range(xs.shape[0]):
            h, c = cell(xs[t], (h, c))
        loss = h.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


WORKLOADS: dict[str, Callable[[torch.device], Step]] = {
    "tiny_kernels": tiny_kernels, "small_mlp_adam": small_mlp_adam,
    "deep_modules": deep_modules, "python_helpers": python_helpers,
    "deep_stack": deep_stack, "lstm_loop": lstm_loop,
}
OPTIONS: dict[str, dict[str, bool]] = {
    "activities": {}, "shapes": {"record_shapes": True}, "stack": {"with_stack": True},
    "shapes+stack": {"record_shapes": True, "with_stack": True},
    # an execution trace recorded over the same steps (as `analyze TRACE --et ET` reads)
    "shapes+stack+et": {"record_shapes": True, "with_stack": True, "et": True},
}
MARK = "tensight_calibration_step"


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def host_ms(step: Step, steps: int, dev: torch.device, blocks: int = 3, mark: bool = False) -> float:
    """Median over `blocks` of the wall time per step of `steps` steps."""
    per: list[float] = []
    for _ in range(blocks):
        step()
        sync(dev)
        t = time.perf_counter()
        for _ in range(steps):
            if mark:
                with torch.profiler.record_function(MARK):
                    step()
            else:
                step()
        sync(dev)
        per.append((time.perf_counter() - t) * 1e3 / steps)
    return sorted(per)[len(per) // 2]


HOST_CATS = {"cpu_op", "python_function", "cuda_runtime", "cuda_driver"}


def events_per_step(path: str) -> dict[str, float]:
    """Host events inside the marked steps of an exported trace, per step, by category."""
    with open(path) as f:
        evs = json.load(f)["traceEvents"]
    marks = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in evs
             if e.get("name") == MARK and e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    counts: dict[str, float] = {c: 0.0 for c in HOST_CATS}
    for e in evs:
        c = e.get("cat")
        if c in HOST_CATS and e.get("ph") == "X" and any(a <= e["ts"] < b for a, b in marks):
            counts[c] += 1
    n = max(len(marks), 1)
    return {c: v / n for c, v in counts.items()}


def measure(name: str, steps: int, dev: torch.device) -> dict[str, Any]:
    step = WORKLOADS[name](dev)
    for _ in range(5):
        step()
    base = host_ms(step, steps, dev)
    out: dict[str, Any] = {"unprofiled_ms": base, "options": {}}
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    for label, opts in OPTIONS.items():
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "t.json")
        kw = {k: v for k, v in opts.items() if k != "et"}
        et = ExecutionTraceObserver() if opts.get("et") else None
        if et is not None:
            et.register_callback(os.path.join(tmp, "et.json"))
        with profile(activities=acts, **kw) as prof:
            if et is not None:
                et.start()
            host_ms(step, 2, dev, blocks=1, mark=True)  # the profiler's own warm-up
            prof_ms = host_ms(step, steps, dev, mark=True)
            if et is not None:
                et.stop()
                et.unregister_callback()
        prof.export_chrome_trace(path)
        ev = events_per_step(path)
        out["options"][label] = {"profiled_ms": prof_ms, "events_per_step": ev}
        print(f"  {name} {label}: {base:.3f} -> {prof_ms:.3f} ms, "
              f"{ {k: round(v) for k, v in ev.items()} }", file=sys.stderr, flush=True)
        # unprofiled again between options: what the host does when no profiler runs
        out.setdefault("unprofiled_after_ms", []).append(host_ms(step, steps, dev))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", default=None, help="JSON file for the numbers")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    res = {n: measure(n, a.steps, dev) for n in a.names}
    ctx = {"torch": torch.__version__, "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
           "date": time.strftime("%Y-%m-%d"), "steps": a.steps,
           "recorded_by": "scripts/h200/plain_calibration.py"}
    for r in res.values():
        r["costs"] = costs(r)
    med = {k: median([r["costs"][k] for r in res.values()]) for k in COSTS}
    doc = {"context": ctx, "costs_ns": med, "workloads": res}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    print(ctx)
    print("| workload | unprofiled ms | " + " | ".join(f"{k}" for k in COSTS) + " |")
    print("| --- " * (len(COSTS) + 2) + "|")
    for n, r in res.items():
        cells = [f"{r['costs'][k]:.0f}" for k in COSTS]
        print(f"| {n} | {r['unprofiled_ms']:.3f} | " + " | ".join(cells) + " |")
    print("| median | | " + " | ".join(f"{med[k]:.0f}" for k in COSTS) + " |")
    return 0


COSTS = tuple(OPTIONS)


def costs(r: dict[str, Any]) -> dict[str, float]:
    """One workload's cost per recorded host event under each option, ns: (profiled −
    unprofiled host time) / host events per step. One figure for every kind of event (an
    op, a runtime call, a Python call), as tensight spreads a bundle's measured cost:
    the differences between kinds are smaller than this machine's step-to-step noise."""
    base = r["unprofiled_ms"]
    out = {}
    for k, v in r["options"].items():
        events = sum(v["events_per_step"].values())
        out[k] = (v["profiled_ms"] - base) * 1e6 / events if events else float("nan")
    return out


def median(xs: list[float]) -> float:
    s = sorted(x for x in xs if x == x)
    return s[len(s) // 2] if s else float("nan")


if __name__ == "__main__":
    sys.exit(main())
