"""Planted: bf16 GEMMs with a vocabulary of 50257 (not a multiple of 8), so cuBLAS
falls back to kernels with narrow loads.

Fixed: the vocabulary padded to 50304 (a multiple of 64).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
vocab = 50304 if args.fixed else 50257
head = nn.Linear(1024, vocab, bias=False).to(dev)
opt = torch.optim.SGD(head.parameters(), lr=1e-3)
h = torch.randn(4096, 1024, device=dev)
y = torch.randint(0, 50257, (4096,), device=dev)


def step(i: int) -> None:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev == "cuda"):
        logits = head(h)
    loss = nn.functional.cross_entropy(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "misaligned_bf16", args.fixed)
