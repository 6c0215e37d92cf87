"""Planted: a DataLoader with ``num_workers=0`` whose dataset does per-sample host work,
so the GPU waits for every batch.

Fixed: ``num_workers=4``, ``pin_memory=True``, ``persistent_workers=True``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from common import parse, run

args = parse(__doc__ or "")
dev = args.device


class Synthetic(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 64, 64, generator=g)
        x = (x - x.mean()) / (x.std() + 1e-6)  # per-sample host work
        return x, i % 10


loader = DataLoader(Synthetic(), batch_size=128, num_workers=4 if args.fixed else 0,
                    pin_memory=args.fixed, persistent_workers=args.fixed)
model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = iter(loader)


def step(i: int) -> None:
    x, y = next(batches)
    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


if __name__ == "__main__":
    run(step, args.steps, "dataloader_starvation", args.fixed)
