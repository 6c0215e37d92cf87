"""Inference only (no optimizer), the model called from no loop of the program's own
(``map`` here, a serving framework's loop in real life): steps are top-level forward
calls."""

import torch
from torch import nn

model = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4)).eval()
normalize = nn.LayerNorm(32, elementwise_affine=False)  # no parameters: not a step


def score(x: torch.Tensor) -> torch.Tensor:
    return model(normalize(x))


with torch.no_grad():
    outs = list(map(score, (torch.randn(8, 32) for _ in range(12))))
print("infer: done", tuple(outs[-1].shape))
