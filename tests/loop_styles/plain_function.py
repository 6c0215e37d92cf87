"""Benchmark-like loop calling a plain Python function on raw tensors (matmul + elementwise).

No nn.Module, no autograd, no optimizer: just ``out = fused_mlp_block(x, w1, w2, b1, scale)``
in a ``for`` loop.  The profiler wraps the middle range of calls; no prof.step().
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


def fused_mlp_block(
    x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, b1: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """A hand-written residual MLP block: x + (gelu(x @ w1 + b1) * scale) @ w2, then RMS-normalised."""
    h = torch.addmm(b1, x, w1)
    h = torch.nn.functional.gelu(h, approximate="tanh") * scale
    y = x + h @ w2
    return y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + 1e-6)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--size", type=int, default=None, help="rows/width; default 640 on CPU, 4096 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)

    n = args.size or (640 if device.type == "cpu" else 4096)
    d, d_ff = n, 2 * n

    def rand(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).to(device)

    x = rand(n, d)
    w1 = rand(d, d_ff, std=d ** -0.5)
    w2 = rand(d_ff, d, std=d_ff ** -0.5)
    b1 = rand(d_ff, std=0.1)
    scale = rand(d_ff).abs() + 0.5
    timer = StepTimer(device)

    window = trace_window(args)
    out = x
    for i in range(window.start if window else args.iters):
        with timer.step():
            out = fused_mlp_block(out, w1, w2, b1, scale)
    if window:
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            for i in window:
                with timer.step():
                    out = fused_mlp_block(out, w1, w2, b1, scale)
        for i in range(window.stop, args.iters):
            with timer.step():
                out = fused_mlp_block(out, w1, w2, b1, scale)
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)

    print(f"checksum {out.double().abs().mean().item():.6f}")
    emit_result("plain_function", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
