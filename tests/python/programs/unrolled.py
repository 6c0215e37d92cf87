"""A recurrence unrolled in forward: a Python loop of 100 cell calls (more than the loop watch waits for an enclosing loop) inside each training
step. The steps are the optimizer's, not the loop inside forward."""

import sys

import torch
from torch import nn


class Unrolled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.RNNCell(8, 16)
        self.out = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[1], 16)
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
        return self.out(h)


model = Unrolled()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(int(sys.argv[1])):
    loss = model(torch.randn(100, 4, 8)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("unrolled: done")
