"""Planted: per-step augmentation on the CPU (crop, flip and normalise a uint8 batch with
tensor ops on the host), then a copy to the GPU.

Fixed: the same augmentation on the GPU, on the uint8 batch copied first.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from common import parse, run

args = parse(__doc__ or "")
dev = args.device
model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(32, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
raw = torch.randint(0, 255, (64, 3, 256, 256), dtype=torch.uint8)
mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
raw_gpu = raw.to(dev)
mean_gpu, std_gpu = mean.to(dev), std.to(dev)


def augment(x: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x = x[:, :, 16:240, 16:240].float().div(255)
    x = torch.flip(x, dims=[3])
    return (x - m) / s


def step(i: int) -> None:
    if args.fixed:
        x = augment(raw_gpu, mean_gpu, std_gpu)
    else:
        x = augment(raw, mean, std).to(dev)
    y = torch.randint(0, 10, (64,), device=dev)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


run(step, args.steps, "cpu_preprocessing", args.fixed)
