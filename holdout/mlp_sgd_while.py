#!/usr/bin/env python3
# Wide MLP classifier on synthetic features, trained with plain hand-written SGD.
#   python mlp_sgd_while.py            -> fp32 everywhere
#   python mlp_sgd_while.py --fixed    -> bf16 autocast for the forward/backward
import argparse
import contextlib
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

p = argparse.ArgumentParser(description="hand-written SGD on a wide MLP")
p.add_argument("--fixed", action="store_true", help="run forward/backward under bf16 autocast")
p.add_argument("--iters", type=int, default=40)
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--trace", default=None)
p.add_argument("--trace-iters", type=int, default=5)
p.add_argument("--et", default=None)
p.add_argument("--lr", type=float, default=0.05)
args = p.parse_args()

device = torch.device(args.device)
gpu = device.type == "cuda"
torch.manual_seed(42)

# sizes
BATCH, D_IN, HIDDEN, DEPTH, N_CLS = (2048, 2048, 4096, 4, 1000) if gpu else (64, 128, 256, 2, 10)

layers = [nn.Linear(D_IN, HIDDEN), nn.GELU()]
for _ in range(DEPTH - 1):
    layers += [nn.Linear(HIDDEN, HIDDEN), nn.GELU()]
layers += [nn.Linear(HIDDEN, N_CLS)]
model = nn.Sequential(*layers).to(device)

# a small pool of batches that already live on the device
POOL = 4
xs = torch.randn(POOL, BATCH, D_IN, device=device)
ys = torch.randint(0, N_CLS, (POOL, BATCH), device=device)


def autocast_ctx():
    if args.fixed and gpu:
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(step):
    x, y = xs[step % POOL], ys[step % POOL]
    with autocast_ctx():
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    loss.backward()
    with torch.no_grad():
        for prm in model.parameters():
            prm -= args.lr * prm.grad
            prm.grad = None
    return loss.detach()


k = min(args.trace_iters, args.iters)
profiling = bool(args.trace or args.et)
first_prof = 10 if args.iters >= 10 + k else max(0, args.iters - k)
prof_range = range(first_prof, first_prof + k) if profiling else range(0)

starts, ends = [], []
losses = []


def one_iteration(step):
    if gpu:
        e0 = torch.cuda.Event(enable_timing=True)
        e0.record()
    else:
        e0 = time.perf_counter()
    losses.append(train_step(step))
    if gpu:
        e1 = torch.cuda.Event(enable_timing=True)
        e1.record()
    else:
        e1 = time.perf_counter()
    starts.append(e0)
    ends.append(e1)


step = 0
while step < args.iters:
    if profiling and step == prof_range.start:
        et = None
        if args.et:
            et = ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU],
                     record_shapes=True, with_stack=True) as prof:
            while step < prof_range.stop and step < args.iters:
                one_iteration(step)
                prof.step()
                step += 1
        if et is not None:
            et.stop()
            et.unregister_callback()
        if args.trace:
            prof.export_chrome_trace(args.trace)
        continue
    one_iteration(step)
    step += 1

if gpu:
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) for a, b in zip(starts, ends)]
else:
    times = [(b - a) * 1e3 for a, b in zip(starts, ends)]
keep = [t for i, t in enumerate(times) if i >= 5 and (not profiling or i < prof_range.start)]
keep = keep or times
keep.sort()
iter_ms = keep[len(keep) // 2]
print(f"loss first {losses[0].item():.4f} last {losses[-1].item():.4f}; median step {iter_ms:.2f} ms")
print("HOLDOUT_RESULT " + json.dumps({"program": "mlp_sgd_while",
                                      "fixes": ["all"] if args.fixed else [],
                                      "iters": args.iters, "iter_ms": iter_ms,
                                      "timing": "CUDA event pair around each step, median"}),
      file=sys.stderr)
