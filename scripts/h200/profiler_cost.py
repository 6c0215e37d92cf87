"""Where the profiler's cost goes: step time of five workloads under each torch.profiler
option, on the device machine (issue 11, "find where the collector's cost goes").

    python3 scripts/h200/profiler_cost.py [--out FILE] [--steps 15] [WORKLOAD...]

For each workload: steps timed with CUDA events (median), first without a profiler, then
inside a running ``torch.profiler.profile`` with one option set each (CPU+CUDA activities
only; + record_shapes; + with_stack; + profile_memory; + with_modules; all four; the
execution-trace observer alone; CUDA activity only; CPU activity only; without
external correlation), then again without a profiler (what a profile that
stopped leaves behind). Nothing is exported: only the cost while recording is measured.
Prints a table (median step ms, and the ratio to the unprofiled step) and writes the
numbers as JSON.
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


def launch_bound(dev: torch.device) -> Step:
    xs = [torch.randn(64, device=dev) for _ in range(8)]

    def step() -> None:
        for _ in range(40):
            for x in xs:
                x.mul_(0.999).add_(0.001)
    return step


def sync_mlp(dev: torch.device) -> Step:
    m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device=dev)

    def step() -> None:
        loss = m(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loss.item() > 1e9:  # the sync
            print("diverged")
    return step


def resnet50(dev: torch.device) -> Step:
    import torchvision

    m = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (32,), device=dev)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def gpt(dev: torch.device) -> Step:
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, norm_first=True)
    m = torch.nn.TransformerEncoder(layer, 6).to(dev)
    head = torch.nn.Linear(512, 8192).to(dev)
    params = list(m.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(8, 256, 512, device=dev)
    y = torch.randint(0, 8192, (8 * 256,), device=dev)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            out = head(m(x)).float()
        loss = torch.nn.functional.cross_entropy(out.view(-1, 8192), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def numpy_host(dev: torch.device) -> Step:
    import numpy as np

    rng = np.random.default_rng(0)
    w = torch.randn(1024, 1024, device=dev)

    def augment(img: Any) -> Any:
        return np.clip(img[:, ::-1] * 1.1 + 0.05, 0.0, 1.0)

    def step() -> None:
        batch = [augment(rng.random((64, 64), dtype=np.float32)) for _ in range(64)]
        x = torch.from_numpy(np.stack(batch).reshape(64, -1)[:, :1024].copy()).to(dev)
        (x @ w).relu_().sum()
    return step


WORKLOADS: dict[str, Callable[[torch.device], Step]] = {
    "launch_bound": launch_bound, "sync_mlp": sync_mlp, "resnet50_bs32": resnet50,
    "gpt_bf16": gpt, "numpy_host": numpy_host,
}

FULL = {"record_shapes": True, "with_stack": True, "profile_memory": True, "with_modules": True}
CONFIGS: list[tuple[str, dict[str, Any] | None]] = [
    ("none", None),
    ("activities", {}),
    ("+shapes", {"record_shapes": True}),
    ("+stack", {"with_stack": True}),
    ("+memory", {"profile_memory": True}),
    ("+modules", {"with_modules": True}),
    ("all", FULL),
    ("shapes+memory", {"record_shapes": True, "profile_memory": True}),
    ("et", {"et": True}),
    # Which half of "activities" costs: the CPU ops (RecordFunction callbacks) or CUPTI's
    # runtime and kernel records; and Kineto's external correlation of the two.
    ("cuda only", {"activities": "cuda"}),
    ("cpu only", {"activities": "cpu"}),
    ("no ext corr", {"experimental": {"disable_external_correlation": True}}),
    ("none after", None),
]


def timed(step: Step, steps: int, dev: torch.device) -> list[float]:
    for _ in range(3):
        step()
    cuda = dev.type == "cuda"
    marks: list[Any] = []
    for _ in range(steps + 1):
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            marks.append(e)
        else:
            marks.append(time.perf_counter())
        step()
    if cuda:
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
    return [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else float("nan")


def measure(name: str, steps: int, dev: torch.device) -> dict[str, float]:
    step = WORKLOADS[name](dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    out: dict[str, float] = {}
    for label, opts in CONFIGS:
        if opts is None:
            out[label] = median(timed(step, steps, dev))
        elif opts.get("et"):
            et = ExecutionTraceObserver()
            path = os.path.join(tempfile.mkdtemp(), "et.json")
            et.register_callback(path)
            et.start()
            out[label] = median(timed(step, steps, dev))
            et.stop()
            et.unregister_callback()
        else:
            opts = dict(opts)
            which = opts.pop("activities", None)
            use = {"cuda": [ProfilerActivity.CUDA], "cpu": [ProfilerActivity.CPU]}.get(
                which, acts) if dev.type == "cuda" else acts
            if "experimental" in opts:
                try:
                    from torch._C._profiler import _ExperimentalConfig
                    opts["experimental_config"] = _ExperimentalConfig(**opts.pop("experimental"))
                except (ImportError, TypeError) as e:  # an older torch: say so, skip
                    print(f"  {name} {label}: not available ({e})", file=sys.stderr)
                    out[label] = float("nan")
                    continue
            with profile(activities=use, **opts):
                out[label] = median(timed(step, steps, dev))
        print(f"  {name} {label}: {out[label]:.3f} ms", file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--out", default=None, help="JSON file for the numbers")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    res = {n: measure(n, a.steps, dev) for n in a.names}
    ctx = {"torch": torch.__version__, "python": platform.python_version(),
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
           "date": time.strftime("%Y-%m-%d"), "steps": a.steps}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"context": ctx, "median_step_ms": res}, f, indent=2)
    labels = [c[0] for c in CONFIGS]
    print(f"{ctx}")
    print("| workload | " + " | ".join(labels) + " |")
    print("| --- " * (len(labels) + 1) + "|")
    for n, r in res.items():
        base = r["none"]
        cells = [f"{r['none']:.2f} ms"] + [f"{r[l] / base:.2f}×" for l in labels[1:]]
        print(f"| {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
