"""Planted: a host sync every step (``loss.item()`` to decide something).

Fixed: the value stays on the GPU and is read every 50 steps.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU()) for _ in range(8)]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, 1024, device=dev)
y = torch.randn(256, 1024, device=dev)
running = torch.zeros((), device=dev)


def step(i: int) -> None:
    global running
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if args.fixed:
        running = running + loss.detach()
        if i % 50 == 49:
            print(f"loss {running.item() / 50:.4f}")
    else:
        # the planted sync: .item() every step
        if loss.item() > 1e9:
            print("diverged")
        # and a second host read for logging
        _ = float(loss)


run(step, args.steps, "sync_in_loop", args.fixed)
