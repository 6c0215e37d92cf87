"""Control (no planted bottleneck): large bf16 GEMMs, compute-bound on tensor cores.
``--fixed`` runs the same program (there is nothing to fix).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
dtype = torch.bfloat16 if dev == "cuda" else torch.float32
model = nn.Sequential(nn.Linear(8192, 8192, bias=False), nn.Linear(8192, 8192, bias=False)).to(dev, dtype)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(8192, 8192, device=dev, dtype=dtype)


def step(i: int) -> None:
    loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "control_bf16_gemm", args.fixed)
