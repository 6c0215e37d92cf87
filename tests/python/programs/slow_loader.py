"""Training fed by a DataLoader slower than the step: `slow_loader.py ITERATIONS`.

Two workers, prefetch_factor 2, each sample takes 30 ms to load, one sample a batch: in
steady state a batch is ready every ~15 ms while the step itself takes about 1 ms, so
every step waits. The first step takes 0.5 s (as one with cuDNN autotuning or a
compilation does), while the workers fill their prefetch: the next four steps take
those batches without waiting."""

import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.03)
        return torch.randn(16), i % 4


iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 24
loader = DataLoader(Slow(), batch_size=1, num_workers=2, prefetch_factor=2)
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for seen, (x, y) in enumerate(loader, 1):
    if seen == 1:
        time.sleep(0.5)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if seen == iterations:
        break
print(f"slow_loader: {seen} batches")
