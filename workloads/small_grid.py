"""Planted: low occupancy: a long loop of GEMMs on a batch of 4 rows, each kernel
launching a handful of blocks on a 132-SM GPU.

Fixed: the same samples processed 128 at a time (a batched call).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(8)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
data = torch.randn(128, 2048, device=dev)


def step(i: int) -> None:
    opt.zero_grad(set_to_none=True)
    if args.fixed:
        model(data).pow(2).mean().backward()
    else:
        for chunk in data.split(4):  # 32 small forward/backward passes
            model(chunk).pow(2).mean().div(32).backward()
    opt.step()


run(step, args.steps, "small_grid", args.fixed)
