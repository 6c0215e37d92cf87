"""Micro-benchmark of the "bias + GELU + residual" epilogue of a transformer MLP.

Benchmarks one call of `bias_gelu_residual` on an activation of shape
(tokens, hidden) per iteration, the way one would before deciding whether the
epilogue is worth optimising.

    python gelu_bias_bench.py             # hand-written tanh-GELU
    python gelu_bias_bench.py --fixed     # fused GELU op
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

PROGRAM = "gelu_bias_bench"
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def bias_gelu_residual(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    # GELU with the tanh approximation, as in the GPT-2 reference code
    h = x + bias
    inner = SQRT_2_OVER_PI * (h + 0.044715 * h * h * h)
    out = 0.5 * h * (1.0 + torch.tanh(inner))
    return out + residual


def bias_gelu_residual_fused(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + bias, approximate="tanh") + residual


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="use the fused GELU op instead of the hand-written one")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--trace", default=None, help="write a chrome trace of --trace-iters iterations")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None, help="also write an execution trace (.json)")
    args = ap.parse_args()

    on_gpu = args.device.startswith("cuda")
    tokens = args.tokens or (32768 if on_gpu else 512)
    hidden = args.hidden or (8192 if on_gpu else 1024)

    torch.manual_seed(0)
    x = torch.randn(tokens, hidden, device=args.device)
    bias = torch.randn(hidden, device=args.device) * 0.1
    residual = torch.randn(tokens, hidden, device=args.device)

    fn = bias_gelu_residual_fused if args.fixed else bias_gelu_residual
    print(f"{PROGRAM}: x={tuple(x.shape)} {x.dtype} on {args.device}, fn={fn.__name__}")

    warmup = min(5, args.iters)
    prof_start = 10 if args.iters >= 10 + args.trace_iters else max(warmup, args.iters - args.trace_iters)
    profiling = args.trace is not None or args.et is not None

    # warm-up
    for _ in range(warmup):
        out = fn(x, bias, residual)
    sync(args.device)

    elapsed = 0.0
    timed = 0

    def timed_block(n: int) -> None:
        nonlocal elapsed, timed, out
        if n <= 0:
            return
        sync(args.device)
        t0 = time.perf_counter()
        for _ in range(n):
            out = fn(x, bias, residual)
        sync(args.device)
        elapsed += time.perf_counter() - t0
        timed += n

    if profiling:
        timed_block(prof_start - warmup)
        et = None
        if args.et:
            et = ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        with profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            for _ in range(args.trace_iters):
                out = fn(x, bias, residual)
            sync(args.device)
        if et is not None:
            et.stop()
            et.unregister_callback()
        if args.trace:
            prof.export_chrome_trace(args.trace)
        # the remaining iterations run untimed (the profiler can leave overhead behind),
        # unless nothing could be timed before the profiled window
        rest = args.iters - prof_start - args.trace_iters
        if timed == 0:
            timed_block(rest)
        else:
            for _ in range(rest):
                out = fn(x, bias, residual)
            sync(args.device)
    else:
        timed_block(args.iters - warmup)

    iter_ms = elapsed / max(timed, 1) * 1e3
    gbytes = 3 * x.numel() * x.element_size() / 1e9  # compulsory traffic: read x, residual; write out
    print(f"{timed} timed calls, {iter_ms:.3f} ms/call, {gbytes / (iter_ms / 1e3):.1f} GB/s effective, "
          f"checksum {out[:4, :4].sum().item():.4f}")
    result = {
        "program": PROGRAM,
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": "perf_counter around the timed loop, synchronize at both ends, mean",
    }
    print("HOLDOUT_RESULT " + json.dumps(result), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
