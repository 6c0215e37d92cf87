"""Inference over request batches, each split into 16 micro-batches the model runs one
by one: a step is a request batch (the loop at line 17), not one of the model's calls."""

import sys

import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4)).eval()


def handle(requests: torch.Tensor) -> torch.Tensor:
    return torch.cat([model(mb) for mb in requests.split(4)])


with torch.no_grad():
    for step in range(int(sys.argv[1])):
        y = handle(torch.randn(64, 32))
print("micro_batches: done", tuple(y.shape))
