"""Planted: a hand-written GELU and bias-scale chain: six elementwise kernels over a
large activation, each reading and writing it once.

Fixed: one ``F.gelu`` (PyTorch's fused kernel) and an in-place scale.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
lin = nn.Linear(4096, 4096).to(dev)
opt = torch.optim.SGD(lin.parameters(), lr=1e-3)
x = torch.randn(8192, 4096, device=dev)


def gelu_manual(t: torch.Tensor) -> torch.Tensor:
    return 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t.pow(3))))


def step(i: int) -> None:
    h = lin(x)
    h = nn.functional.gelu(h, approximate="tanh") if args.fixed else gelu_manual(h)
    loss = h.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "unfused_chain", args.fixed)
