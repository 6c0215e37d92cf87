"""Trains, then raises at iteration CRASH_AT: `crash.py CRASH_AT`."""

import sys

import torch
from torch import nn

crash_at = int(sys.argv[1])
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(i: int) -> None:
    if i == crash_at:
        raise RuntimeError(f"planted crash at iteration {i}")
    loss = model(torch.randn(4, 8)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


for i in range(1, 100):
    train_step(i)
