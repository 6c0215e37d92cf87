"""Training loop that logs NVTX range starts/ends with the iteration they fall in:
`nvtx_probe.py [ITERATIONS] [compile|mode]` (`compile`: the model runs through
`torch.compile(backend="eager")`; `mode`: the loop runs inside a dispatch mode of its own). Prints `nvtx start NAME at I` / `nvtx end ID at I` on
stderr (I counts from 1; a start between iterations I-1 and I says I) and
`train: done N`. Push/pop ranges are logged too, as `nvtx push`/`nvtx pop`."""

import contextlib
import sys

import torch
from torch import nn

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 12
current = 1


def push(name: str) -> int:
    print(f"nvtx push {name} at {current}", file=sys.stderr)
    return 0


def pop() -> int:
    print(f"nvtx pop at {current}", file=sys.stderr)
    return 0


def start(name: str) -> int:
    print(f"nvtx start {name} at {current}", file=sys.stderr)
    return 7


def end(range_id: int) -> None:
    print(f"nvtx end {range_id} at {current}", file=sys.stderr)


torch.cuda.nvtx.range_push = push
torch.cuda.nvtx.range_pop = pop
torch.cuda.nvtx.range_start = start
torch.cuda.nvtx.range_end = end
# Two identical layers: the second repeats the first's op calls (the hardware pass
# marks such repeats for ncu to skip).
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
if len(sys.argv) > 2 and sys.argv[2] == "compile":
    model = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
outer: object = contextlib.nullcontext()
if len(sys.argv) > 2 and sys.argv[2] == "mode":
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    outer = Passthrough()
with outer:
    for i in range(1, iterations + 1):
        current = i
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        current = i + 1
print(f"train: done {iterations}")
