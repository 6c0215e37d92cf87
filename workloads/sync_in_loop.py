"""Planted: a host sync every step (``loss.item()`` to check for divergence), in a loop
whose host also has real work per step (hashing the batch's metadata for a sample log).

Without the sync, the host does step i+1's bookkeeping while the GPU still runs step i;
with it, the two take turns: the GPU idles for the host's work every step.

Fixed: the loss stays on the GPU and is read every 50 steps.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(*[nn.Sequential(nn.Linear(4096, 4096), nn.GELU()) for _ in range(6)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device=dev)
y = torch.randn(4096, 4096, device=dev)
meta = bytes(range(256)) * (12 << 10)  # 3 MiB of per-sample metadata, hashed every step
running = torch.zeros((), device=dev)


def step(i: int) -> None:
    global running
    digest = hashlib.sha256(meta + i.to_bytes(4, "little")).hexdigest()  # host work, ~2 ms
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if args.fixed:
        running = running + loss.detach()
        if i % 50 == 49:
            print(f"loss {running.item() / 50:.4f} {digest[:8]}")
    elif loss.item() > 1e9:  # the planted sync: .item() every step
        print("diverged", digest[:8])


run(step, args.steps, "sync_in_loop", args.fixed)
