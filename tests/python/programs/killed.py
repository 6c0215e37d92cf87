"""A training loop that ends abnormally: `killed.py MODE`.

MODE `term-early`: SIGTERM before the first step; `term-window`: SIGTERM at step 6 (inside
tensight's window with --warmup 2 --steps 3); `oom`: a CUDA out-of-memory error raised at
step 5 (while the window records)."""

import os
import signal
import sys

import torch
from torch import nn

mode = sys.argv[1]
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)
if mode == "term-early":
    os.kill(os.getpid(), signal.SIGTERM)
for step in range(1, 13):
    if mode == "term-window" and step == 6:
        os.kill(os.getpid(), signal.SIGTERM)
    if mode == "oom" and step == 5:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 MiB.")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("killed: not killed")
