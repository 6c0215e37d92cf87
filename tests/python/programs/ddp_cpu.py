"""A small DDP training job on CPU (gloo), run by torchrun: `ddp_cpu.py [--steps N]
[--straggler] [--crash-rank R --crash-step K [--hang-rank H]]`.

Every rank trains the same model on its own random batches; DDP all-reduces the
gradients in backward (a collective per step, so a rank that runs late makes the others
wait). `--straggler`: rank 1 does ~25 ms of extra host work (a numpy loop) before each
step's forward: the planted straggler. `--crash-rank R --crash-step K`: rank R raises at
step K (torchrun then ends the other ranks with SIGTERM); `--hang-rank H`: rank H waits
at step K, in Python, until that SIGTERM comes. Rank 0 prints `ddp: done N`."""

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=14)
p.add_argument("--straggler", action="store_true")
p.add_argument("--crash-rank", type=int, default=-1)
p.add_argument("--crash-step", type=int, default=-1)
p.add_argument("--hang-rank", type=int, default=-1)
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(rank)


def host_work(ms: float) -> None:
    """Busy host work for about `ms` milliseconds (numpy, in small pieces)."""
    end = time.perf_counter() + ms / 1e3
    a = np.ones(2048)
    while time.perf_counter() < end:
        a = np.sqrt(a * 1.0001 + 1.0)


for step in range(1, args.steps + 1):
    if rank == args.crash_rank and step == args.crash_step:
        raise RuntimeError(f"rank {rank} crashed at step {step}")
    if rank == args.hang_rank and step == args.crash_step:
        for _ in range(12_000):  # 2 minutes at most
            time.sleep(0.01)
    if args.straggler and rank == 1:
        host_work(25.0)
    x = torch.randn(32, 64, generator=gen)
    y = torch.randint(0, 8, (32,), generator=gen)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
if rank == 0:
    print(f"ddp: done {args.steps}")
