"""Planted: each step's batch (64 MB of fp32) sits in pageable host memory and is
copied with a blocking ``.to('cuda')``.

Fixed: the batch lives in pinned memory and is copied with ``non_blocking=True``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
host = [torch.randn(4096, 4096) for _ in range(2)]
if args.fixed and dev == "cuda":
    host = [h.pin_memory() for h in host]
y = torch.randint(0, 10, (4096,), device=dev)


def step(i: int) -> None:
    x = host[i % 2].to(dev, non_blocking=args.fixed)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "pageable_h2d", args.fixed)
