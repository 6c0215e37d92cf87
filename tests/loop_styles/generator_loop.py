"""Generator-driven loop: the training step lives inside a generator that yields after every step.

``train_steps(...)`` is an endless generator; each ``next()`` runs one step
(forward, backward, RMSprop update of a 1-D conv autoencoder on a fresh batch
from a second generator) and yields the loss.  The driver pulls ``--iters``
steps.  The profiler wraps the middle pulls; no prof.step().
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class ConvAutoencoder1d(nn.Module):
    def __init__(self, channels: int = 4, width: int = 32) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(channels, width, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(width, 2 * width, 5, stride=2, padding=2), nn.GELU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(2 * width, width, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(width, channels, 4, stride=2, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def signal_batches(batch: int, channels: int, length: int, device: torch.device, seed: int) -> Iterator[torch.Tensor]:
    """Endless batches of noisy random sinusoids."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    t = torch.linspace(0, 1, length)
    while True:
        freq = torch.rand(batch, channels, 1, generator=g) * 20 + 1
        phase = torch.rand(batch, channels, 1, generator=g) * 6.28
        clean = torch.sin(2 * torch.pi * freq * t + phase)
        yield (clean + 0.1 * torch.randn(clean.shape, generator=g)).to(device)


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterator[torch.Tensor]) -> Iterator[torch.Tensor]:
    model.train()
    for x in batches:
        recon = model(x)
        loss = F.smooth_l1_loss(recon, x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        yield loss.detach()


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=None, help="default: 32 on CPU, 256 on CUDA")
    parser.add_argument("--length", type=int, default=512, help="signal length")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    batch_size = args.batch_size or (32 if device.type == "cpu" else 256)
    model = ConvAutoencoder1d().to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    steps = train_steps(model, optimizer, signal_batches(batch_size, 4, args.length, device, args.seed))
    timer = StepTimer(device)
    losses: list[torch.Tensor] = []

    def pull(count: int) -> None:
        for _ in range(count):
            timer.start()
            losses.append(next(steps))
            timer.stop()

    window = trace_window(args)
    if window:
        pull(window.start)
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            pull(len(window))
        pull(args.iters - window.stop)
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    else:
        pull(args.iters)

    print(f"reconstruction loss {losses[0].item():.4f} -> {losses[-1].item():.4f}")
    emit_result("generator_loop", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
