"""Shared harness of the planted-bottleneck workloads.

Each workload is a small PyTorch training (or inference) loop with ONE planted
bottleneck and a ``--fixed`` variant that removes it. Run one directly to time it
(it prints the median step time, measured with CUDA events, as one JSON line on
stderr), or under ``tensight run -- python workloads/NAME.py`` to diagnose it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable

import torch


def parse(description: str, steps: int = 30) -> argparse.Namespace:
    """Parse the common options. Every workload starts from a tuned baseline with TF32
    matmuls and convolutions on, so the one planted bottleneck is the one that shows
    (fp32_gemm.py turns TF32 off again: that is its planted bottleneck)."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--fixed", action="store_true", help="run the variant with the bottleneck removed")
    p.add_argument("--steps", type=int, default=steps, help="training steps to run")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args()


def run(step: Callable[[int], None], steps: int, name: str, fixed: bool) -> None:
    """Run ``step(i)`` ``steps`` times and report the median step time of the second
    half. Steps are timed with CUDA events recorded between steps and read once at the
    end, so timing adds no host sync inside the loop (it would be a planted sync of its
    own); on CPU, with the host clock.
    """
    cuda = torch.cuda.is_available()
    marks: list[object] = []
    for i in range(steps):
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks.append(ev)
        else:
            marks.append(time.perf_counter())
        step(i)
    if cuda:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        marks.append(end)
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]  # type: ignore[attr-defined]
    else:
        marks.append(time.perf_counter())
        times = [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]  # type: ignore[operator]
    tail = sorted(times[len(times) // 2 :])
    median = tail[len(tail) // 2] if tail else 0.0
    out = {"workload": name, "fixed": fixed, "steps": steps, "median_step_ms": round(median, 4)}
    if os.environ.get("WORKLOAD_ALL_TIMES") == "1":
        out["step_ms"] = [round(t, 3) for t in times]
    print(json.dumps(out), file=sys.stderr)
