"""Planted: the input is created on the CPU each step and moved with ``.cuda()``
(pageable memory, a blocking copy).

Fixed: the input is created on the GPU directly.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step(i: int) -> None:
    if args.fixed:
        x = torch.randn(64, 3, 128, 128, device=dev)
    else:
        x = torch.randn(64, 3, 128, 128).to(dev)  # the planted late migration
    y = torch.randint(0, 10, (64,), device=dev)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "late_migration", args.fixed)
