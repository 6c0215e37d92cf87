"""Training fed by a DataLoader with two worker processes: `dataloader.py ITERATIONS`."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 12
data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
seen = 0
while seen < iterations:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += 1
        if seen == iterations:
            break
print(f"dataloader: {seen} batches")
