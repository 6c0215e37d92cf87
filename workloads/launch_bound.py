"""Planted: launch-bound: a deep stack of tiny layers at batch 8, so each kernel runs a
few µs and the host cannot launch them fast enough.

Fixed: the same model captured in a CUDA graph (torch.compile mode="reduce-overhead"
needs a compiler toolchain; a CUDA graph replays the same kernels without the host).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.ReLU()) for _ in range(24)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8, 64, device=dev)
y = torch.randn(8, 64, device=dev)

graph = None
if args.fixed and dev == "cuda":
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()


def step(i: int) -> None:
    if graph is not None:
        graph.replay()
        return
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "launch_bound", args.fixed)
