"""Tensor code with neither modules, optimizers nor loops: profiled as a whole program."""

import torch

a = torch.randn(64, 64)
a = torch.tanh(a @ a.T / 64)
a = torch.tanh(a @ a.T / 64)
a = torch.tanh(a @ a.T / 64)
print("whole: done", round(float(a.sum()), 3) is not None)
