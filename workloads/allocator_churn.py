"""Planted: ``torch.cuda.empty_cache()`` every step, so the caching allocator returns its
blocks and calls cudaMalloc/cudaFree again in the next step.

Fixed: no ``empty_cache()`` in the loop.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 4096)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device=dev)


def step(i: int) -> None:
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if not args.fixed and dev == "cuda":
        torch.cuda.empty_cache()  # the planted churn


run(step, args.steps, "allocator_churn", args.fixed)
