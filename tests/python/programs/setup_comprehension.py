"""A benchmark over raw tensors: its weights are built in list comprehensions (tensor work
in every iteration), then a plain loop calls the function it times."""

import sys

import torch


def layer_stack(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    for w in weights:
        x = torch.tanh(x @ w)
    return x


weights = [torch.randn(64, 64) @ torch.eye(64) / 8 for _ in range(120)]
biases = {i: torch.zeros(64) + i for i in range(120)}
x = torch.randn(32, 64)
for step in range(int(sys.argv[1])):
    y = layer_stack(x, weights[:16]) + biases[step % 120]
print("setup_comprehension: done", tuple(y.shape))
