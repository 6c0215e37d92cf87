"""Benchmark script whose data is built in a loop before the timed loop.

A setup loop assembles the inputs piece by piece (a dozen quick iterations of small ops),
then the benchmark calls ``solve`` in its own loop, each call an inner loop of a few
iterations; ``torch.cuda.synchronize()`` around the timed range.  The setup loop repeats
long enough to look like a step loop; the program's time is spent in the second one.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window

SETUP_PIECES = 14


def assemble(n: int, device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A symmetric positive definite matrix and a right-hand side, one rank-k piece at a time."""
    a = torch.zeros(n, n, device=device)
    b = torch.zeros(n, device=device)
    for _ in range(SETUP_PIECES):
        piece = torch.randn(n, 4, generator=gen).to(device)
        a += piece @ piece.T
        b += piece.sum(1)
    a += n * torch.eye(n, device=device)
    return a, b


def solve(a: torch.Tensor, b: torch.Tensor, iters: int = 6) -> torch.Tensor:
    """Jacobi-preconditioned Richardson iterations."""
    x = torch.zeros_like(b)
    d = a.diagonal().unsqueeze(-1)
    for _ in range(iters):
        x = x + (b - a @ x) / d
    return x


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--size", type=int, default=None, help="matrix size; default 1024 on CPU, 8192 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    n = args.size or (1024 if device.type == "cpu" else 8192)
    a, b = assemble(n, device, gen)
    # A batch of right-hand sides makes each solve a few matrix products long.
    rhs = b[:, None].repeat(1, 64)
    timer = StepTimer(device)
    window = trace_window(args)
    prof = None
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    x = rhs
    for i in range(args.iters):
        if window and i == window.start:
            activities = [ProfilerActivity.CPU]
            if device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            prof = profile(activities=activities, record_shapes=True, with_stack=True)
            prof.__enter__()
        with timer.step():
            x = solve(a, rhs)
        if prof is not None and i == window.stop - 1:
            prof.__exit__(None, None, None)
            Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(args.trace)
            prof = None
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.iters} solves in {time.perf_counter() - t0:.3f} s; checksum "
          f"{x.double().abs().mean().item():.6f}")
    emit_result("setup_then_bench", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
