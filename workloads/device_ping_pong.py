"""Planted: activations go to the CPU for a "custom" op (a clamp done in numpy style)
and back to the GPU every step.

Fixed: the same op on the GPU.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
enc = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU()).to(dev)
dec = nn.Sequential(nn.Linear(2048, 1024)).to(dev)
opt = torch.optim.SGD(list(enc.parameters()) + list(dec.parameters()), lr=1e-3)
x = torch.randn(2048, 1024, device=dev)


def step(i: int) -> None:
    h = enc(x)
    if args.fixed:
        h = h.clamp(-1, 1)
    else:
        h = h.cpu().clamp(-1, 1).to(dev)  # the planted round trip
    loss = (dec(h) - x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "device_ping_pong", args.fixed)
