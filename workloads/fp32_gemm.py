"""Planted: large fp32 GEMMs with TF32 disabled (no tensor cores).

Fixed: bf16 autocast (tensor cores).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
torch.backends.cuda.matmul.allow_tf32 = False
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(2048, 4096, device=dev)
y = torch.randn(2048, 4096, device=dev)


def step(i: int) -> None:
    ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if args.fixed and dev == "cuda" else contextlib.nullcontext()
    with ctx:
        loss = nn.functional.mse_loss(model(x).float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "fp32_gemm", args.fixed)
