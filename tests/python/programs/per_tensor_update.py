"""A hand-written update over a flat list of 200 tensors, one iteration of the program's
loop each: the loop over the tensors makes 200 back edges before the step loop makes its
first, and is inside the step."""

import sys

import torch


def update(params: list[torch.Tensor], grads: list[torch.Tensor], lr: float) -> None:
    for p, g in zip(params, grads):
        p.mul_(0.999).add_(g, alpha=-lr)


params = [torch.randn(32, 32) for _ in range(200)]
grads = [torch.randn(32, 32) * 1e-3 for _ in range(200)]
for step in range(int(sys.argv[1])):
    update(params, grads, 1e-2)
print("per_tensor_update: done", float(params[0].sum()))
