"""A small CPU training loop: `train_cpu.py [ITERATIONS] [EXIT_CODE]`.

Prints to stdout and stderr, then exits with EXIT_CODE (default 0): the collector must
pass all three through unchanged."""

import sys

import torch
from torch import nn

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 12
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
print("train: start")
print("train: a line on stderr", file=sys.stderr)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for i in range(iterations):
    x = torch.randn(16, 32)
    y = torch.randint(0, 8, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"train: done {iterations}")
sys.exit(code)
