"""Classic training loop: an nn.Module MLP, AdamW, loss.backward(), optimizer.step(), zero_grad().

The profiler wraps a middle section of the loop (the loop is split in three
ranges) and prof.step() is called after every profiled step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class MLP(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, n_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, d_hidden),
            nn.GELU(),
            nn.Linear(d_hidden, d_hidden),
            nn.GELU(),
            nn.LayerNorm(d_hidden),
            nn.Linear(d_hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 256 on CPU, 2048 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    batch_size = args.batch_size or (256 if device.type == "cpu" else 2048)
    d_in, d_hidden, n_classes = 512, 768, 10
    model = MLP(d_in, d_hidden, n_classes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    batches = [
        (torch.randn(batch_size, d_in, device=device), torch.randint(0, n_classes, (batch_size,), device=device))
        for _ in range(8)
    ]
    timer = StepTimer(device)

    def train_step(step: int) -> torch.Tensor:
        x, y = batches[step % len(batches)]
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    window = trace_window(args)
    first_profiled = window.start if window else args.iters
    model.train()
    loss = torch.zeros(())

    for step in range(first_profiled):
        with timer.step():
            loss = train_step(step)

    if window:
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            for step in window:
                with timer.step():
                    loss = train_step(step)
                prof.step()
        for step in range(window.stop, args.iters):
            with timer.step():
                loss = train_step(step)
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)

    print(f"final loss {loss.item():.4f}")
    emit_result("optimizer_loop", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
