"""Inference only (no optimizer): steps are top-level forward calls."""

import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4)).eval()
normalize = nn.LayerNorm(32, elementwise_affine=False)  # no parameters: not a step
with torch.no_grad():
    for _ in range(12):
        y = model(normalize(torch.randn(8, 32)))
print("infer: done", tuple(y.shape))
