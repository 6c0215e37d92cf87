"""Planted: an activation is transposed (``h.t()``) and fed to a chain of elementwise
ops that mix it with contiguous tensors. Each op's output takes the transposed layout of
its first operand, so every op of the chain reads its other operand across its stride.

Fixed: the transposed activation is materialised once (``.contiguous()``) where the
chain starts; the chain then runs on contiguous tensors.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
n = 8192
x = torch.randn(n, n, device=dev)
a = torch.randn(n, n, device=dev)
b = torch.randn(n, n, device=dev)
c = torch.randn(n, n, device=dev)
w = nn.Parameter(torch.ones(n, device=dev))
opt = torch.optim.SGD([w], lr=1e-3)


def step(i: int) -> None:
    with torch.no_grad():
        h = x * 0.5  # an activation, contiguous
        ht = h.t()  # the planted transposed view
        if args.fixed:
            ht = ht.contiguous()
        y = ht * a + b  # output follows ht's layout: a and b are read across their strides
        z = torch.relu(y) - c
    loss = (z * w).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "transposed_chain", args.fixed)
