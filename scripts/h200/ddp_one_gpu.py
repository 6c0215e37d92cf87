"""A DDP training job for torchrun on the one H200 (issue 17's check of the recording
path while no 2-GPU machine is lent): both ranks share cuda:0 and all-reduce through gloo
(NCCL refuses two ranks on one GPU), so the collectives are host-staged gloo calls, not
NCCL kernels.

    torchrun --nproc-per-node 2 scripts/h200/ddp_one_gpu.py [--straggler] [--steps N]

Model: a small transformer LM (4 layers, d=512, bf16 autocast) on random tokens.
`--straggler`: rank 1 does ~20 ms of numpy host work before each step's forward (the
planted straggler; every all-reduce waits for it). Each rank prints its own median step
time (CUDA events, steps 5..N-1) as `DDP_RESULT {json}` on stderr.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--straggler", action="store_true")
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
torch.manual_seed(0)
V, S, D, L, B = 8192, 256, 512, 4, 16
layer = nn.TransformerEncoderLayer(D, 8, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
model = nn.Sequential(nn.Embedding(V, D), nn.TransformerEncoder(layer, L), nn.Linear(D, V)).to(dev)
model = DistributedDataParallel(model, device_ids=[dev.index])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
gen = torch.Generator(device=dev).manual_seed(rank)


def host_work(ms: float) -> None:
    """Busy numpy host work for about `ms` milliseconds."""
    end = time.perf_counter() + ms / 1e3
    a = np.ones(4096)
    while time.perf_counter() < end:
        a = np.sqrt(a * 1.0001 + 1.0)


marks = []
for step in range(args.steps):
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    marks.append(e)
    if args.straggler and rank == 1:
        host_work(20.0)
    x = torch.randint(0, V, (B, S + 1), device=dev, generator=gen)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x[:, :-1])
    loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
end = torch.cuda.Event(enable_timing=True)
end.record()
torch.cuda.synchronize()
marks.append(end)
ms = sorted(marks[i].elapsed_time(marks[i + 1]) for i in range(5, len(marks) - 1))
res = {"rank": rank, "straggler": args.straggler, "step_ms": round(ms[len(ms) // 2], 3)}
print("DDP_RESULT " + json.dumps(res), file=sys.stderr, flush=True)
dist.destroy_process_group()
