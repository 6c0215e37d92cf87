"""A micro-benchmark that times every call itself: synchronize + perf_counter around each call.

The benchmarked call is a hand-written causal attention (matmul, mask, softmax,
matmul).  There is a synchronize before and after the timed loop, each
iteration is ``t0 = perf_counter(); attention(...); synchronize(); t1 = ...``
(on CPU there is nothing to synchronize), and the program prints its own
statistics.  ``step_ms`` in LOOP_RESULT is this program's own per-call timer.
The profiler wraps the middle part of the timed loop; no prof.step().
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from _loop_common import base_parser, emit_result, parse_args, resolve_device, trace_window


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--seq", type=int, default=None, help="sequence length; default 320 on CPU, 2048 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    seq = args.seq or (320 if device.type == "cpu" else 2048)
    batch, heads, head_dim = 4, 8, 64
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=device) for _ in range(3))

    synchronize: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times_ms: list[float] = []

    def timed_calls(count: int) -> None:
        for _ in range(count):
            t0 = time.perf_counter()
            causal_attention(q, k, v)
            synchronize()
            times_ms.append((time.perf_counter() - t0) * 1e3)

    window = trace_window(args)
    synchronize()
    if window:
        timed_calls(window.start)
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            timed_calls(len(window))
        timed_calls(args.iters - window.stop)
    else:
        timed_calls(args.iters)
    synchronize()

    if args.trace:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)

    ordered = sorted(times_ms)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    flops = 4 * batch * heads * seq * seq * head_dim
    best = ordered[0]
    print(
        f"causal_attention b={batch} h={heads} s={seq} d={head_dim} on {device}: "
        f"n={len(times_ms)} mean {statistics.fmean(times_ms):.3f} ms, median {statistics.median(times_ms):.3f} ms, "
        f"p90 {p90:.3f} ms, min {best:.3f} ms ({flops / best / 1e6:.1f} GFLOP/s at min)"
    )
    emit_result("timing_sync_loop", times_ms, list(window))


if __name__ == "__main__":
    main()
