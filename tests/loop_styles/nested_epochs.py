"""Epochs x batches: nested training loops with a short eval pass at the end of every epoch.

``--iters N`` is the number of training steps over all epochs; with
``--steps-per-epoch B`` (default 10) it runs ``ceil(N / B)`` epochs, the last
one cut short if ``B`` does not divide ``N``.  After each epoch an eval pass
of ``--eval-batches`` (default 3) batches runs under ``torch.no_grad()``; eval
batches are not steps (not in ``step_ms``, not counted in ``iters``).  The
profiler is entered when training step ``--trace-start`` begins and left
after step ``--trace-start + --trace-iters - 1`` ends; with the defaults
(5, 5, B=10) that is the second half of epoch 0, ending just before its eval
pass.  prof.step() is called after each profiled step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class GRUClassifier(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, n_classes: int) -> None:
        super().__init__()
        self.gru = nn.GRU(d_in, d_hidden, batch_first=True)
        self.head = nn.Sequential(nn.LayerNorm(d_hidden), nn.Linear(d_hidden, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(x)
        return self.head(h[-1])


def minibatches(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator | None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (x, y) mini-batches, shuffled when a generator is given."""
    n = x.shape[0]
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    order = order.to(x.device)
    for start in range(0, n - batch_size + 1, batch_size):
        idx = order[start : start + batch_size]
        yield x[idx], y[idx]


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--steps-per-epoch", type=int, default=10, help="training batches per epoch")
    parser.add_argument("--eval-batches", type=int, default=3, help="eval batches after each epoch")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 32 on CPU, 256 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    shuffle_gen = torch.Generator().manual_seed(args.seed + 1)

    batch_size = args.batch_size or (32 if device.type == "cpu" else 256)
    seq_len, d_in, d_hidden, n_classes = 24, 32, 128, 5
    n_epochs = math.ceil(args.iters / args.steps_per_epoch)

    def make_split(n_batches: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n_batches * batch_size, seq_len, d_in, device=device)
        y = (x[:, :, :n_classes].sum(dim=1)).argmax(dim=1)
        return x, y

    train_x, train_y = make_split(args.steps_per_epoch)
    val_x, val_y = make_split(args.eval_batches)
    model = GRUClassifier(d_in, d_hidden, n_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    timer = StepTimer(device)

    window = trace_window(args)
    prof: profile | None = None
    global_step = 0
    with ExitStack() as profiling:
        for epoch in range(n_epochs):
            model.train()
            steps_this_epoch = min(args.steps_per_epoch, args.iters - global_step)
            for batch_idx, (x, y) in enumerate(minibatches(train_x, train_y, batch_size, shuffle_gen)):
                if batch_idx == steps_this_epoch:
                    break
                if window and global_step == window.start:
                    activities = [ProfilerActivity.CPU]
                    if device.type == "cuda":
                        activities.append(ProfilerActivity.CUDA)
                    prof = profiling.enter_context(
                        profile(activities=activities, record_shapes=True, with_stack=True)
                    )
                with timer.step():
                    optimizer.zero_grad()
                    loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                    optimizer.step()
                if prof is not None and global_step in window:
                    prof.step()
                    if global_step == window.stop - 1:
                        profiling.close()
                global_step += 1

            model.eval()
            correct = total = 0
            with torch.no_grad():
                for x, y in minibatches(val_x, val_y, batch_size, None):
                    correct += int((model(x).argmax(dim=1) == y).sum())
                    total += y.numel()
            print(f"epoch {epoch}: {steps_this_epoch} steps, last loss {loss.item():.4f}, val acc {correct / total:.3f}")

    if prof is not None:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    emit_result("nested_epochs", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
