"""A program that crashes inside tensight's window, and gets SIGTERM while the collector
writes the bundle at exit (as a rank of a torchrun job does when torchrun ends it after
another rank failed): `term_while_finishing.py`. The bundle must still be complete."""

import os
import signal

import torch
from torch import nn

from tensight import collect

c = collect._active
assert c is not None, "run under tensight's collector"
finalize = c._finalize_recording


def term_then_finalize() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: mid-finish
    finalize()


c._finalize_recording = term_then_finalize  # type: ignore[method-assign]
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16)
for step in range(1, 13):
    if step == 6:
        raise RuntimeError("planted crash at step 6")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
