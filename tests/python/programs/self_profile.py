"""Profiles its own first steps with torch.profiler, then trains on: both must work."""

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step() -> None:
    loss = model(torch.randn(8, 16)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(3):
        step()
print("own profile has events:", len(prof.events()) > 0)
for _ in range(12):
    step()
print("self_profile: done")
