"""Planted: an elementwise op mixes a tensor with a transposed view of another, so one
operand is read across its stride (non-contiguous access) every step.

Fixed: the transposed operand is materialised once (``.contiguous()``) outside the loop.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
a = torch.randn(8192, 8192, device=dev)
b = torch.randn(8192, 8192, device=dev)
w = nn.Parameter(torch.ones(8192, device=dev))
opt = torch.optim.SGD([w], lr=1e-3)
bt = b.t().contiguous() if args.fixed else None


def step(i: int) -> None:
    other = bt if bt is not None else b.t()  # the planted transposed view
    loss = ((a + other) * w).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "transposed_view", args.fixed)
