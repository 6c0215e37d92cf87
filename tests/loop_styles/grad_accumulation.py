"""Gradient accumulation: 4 micro-batches (forward + backward each) per optimizer step.

One step of the loop, as counted by ``--iters`` and timed in ``step_ms``, is
one optimizer step, i.e. ``--accum`` (default 4) micro-batches followed by
``optimizer.step()`` and ``zero_grad()``.  A cosine learning-rate schedule
steps with the optimizer.  The profiler is entered at the first profiled step
from inside the loop and left after the last; no prof.step().
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class Regressor(nn.Module):
    def __init__(self, d_in: int, d_hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(d_in, d_hidden), nn.SiLU(), nn.Dropout(0.1), nn.Linear(d_hidden, d_hidden), nn.SiLU()
        )
        self.out = nn.Linear(d_hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x)).squeeze(-1)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=None, help="default: 64 on CPU, 512 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    micro = args.micro_batch or (64 if device.type == "cpu" else 512)
    d_in, d_hidden = 384, 768
    model = Regressor(d_in, d_hidden).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.iters)
    # A pool of micro-batches; targets come from a fixed random projection plus noise.
    proj = torch.randn(d_in, device=device) / d_in ** 0.5
    xs = torch.randn(16, micro, d_in, device=device)
    ys = torch.sin(xs @ proj) + 0.05 * torch.randn(16, micro, device=device)
    timer = StepTimer(device)

    window = trace_window(args)
    prof: profile | None = None
    model.train()
    micro_index = 0
    loss_sum = torch.zeros((), device=device)
    with ExitStack() as profiling:
        for step in range(args.iters):
            if window and step == window.start:
                activities = [ProfilerActivity.CPU]
                if device.type == "cuda":
                    activities.append(ProfilerActivity.CUDA)
                prof = profiling.enter_context(
                    profile(activities=activities, record_shapes=True, with_stack=True)
                )
            with timer.step():
                for _ in range(args.accum):
                    x, y = xs[micro_index % len(xs)], ys[micro_index % len(ys)]
                    micro_index += 1
                    loss = F.mse_loss(model(x), y) / args.accum
                    loss.backward()
                    loss_sum += loss.detach()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            if window and step == window.stop - 1:
                profiling.close()

    if prof is not None:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    print(f"mean loss {loss_sum.item() / args.iters:.4f}, final lr {scheduler.get_last_lr()[0]:.2e}")
    emit_result("grad_accumulation", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
