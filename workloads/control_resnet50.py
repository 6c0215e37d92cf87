"""Control (tuned): torchvision ResNet-50 training at batch 128 with bf16 autocast,
channels_last and a fused AdamW. ``--fixed`` runs the same program.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torchvision

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev == "cuda")
x = torch.randn(128, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (128,), device=dev)


def step(i: int) -> None:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev == "cuda"):
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "control_resnet50", args.fixed)
