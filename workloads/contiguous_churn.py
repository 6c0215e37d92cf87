"""Planted: four heads each read a feature map in another layout and each makes its own
copy, ``feats.transpose(1, 2).contiguous()``, every step: four copies of one 256 MiB
view where one would do.

Fixed: the transposed copy is made once per step and shared by the heads.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
feats = torch.randn(16, 1024, 4096, device=dev)  # [batch, channels, length]
heads = nn.ModuleList(nn.Linear(1024, 8) for _ in range(4)).to(dev)
opt = torch.optim.SGD(heads.parameters(), lr=1e-3)


def step(i: int) -> None:
    shared = feats.transpose(1, 2).contiguous() if args.fixed else None
    loss = torch.zeros((), device=dev)
    for head in heads:
        x = shared if shared is not None else feats.transpose(1, 2).contiguous()  # the planted copy
        loss = loss + head(x).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "contiguous_churn", args.fixed)
