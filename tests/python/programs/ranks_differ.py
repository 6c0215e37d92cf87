"""A job whose ranks find their steps differently (not SPMD): `ranks_differ.py`.

Both ranks call the model once per iteration and all-reduce a tensor (gloo, CPU); only
rank 0 trains (loss.backward, optimizer.step), so rank 0's steps are optimizer steps and
rank 1's its model calls or the loop around them: `tensight run` must warn that the
ranks' steps do not line up."""

import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Linear(32, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(14):
    x = torch.randn(16, 32)
    if rank == 0:
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        with torch.no_grad():
            model(x)
    t = torch.ones(4)
    dist.all_reduce(t)
dist.destroy_process_group()
