"""A torch.compile'd training step: forward, loss, backward and optimizer step in one function.

``--backend`` picks the torch.compile backend (default "inductor"; "aot_eager"
compiles quickly and is what CPU CI uses).  Step 0 pays for compilation.  The
profiler wraps the middle range of steps and prof.step() is called after each.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class ConvNet(nn.Module):
    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--backend", default="inductor", help='torch.compile backend ("inductor", "aot_eager", ...)')
    parser.add_argument("--batch-size", type=int, default=None, help="default: 24 on CPU, 256 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    batch_size = args.batch_size or (24 if device.type == "cpu" else 256)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(4, batch_size, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (4, batch_size), device=device)

    @torch.compile(backend=args.backend)
    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    timer = StepTimer(device)
    window = trace_window(args)
    model.train()
    loss = torch.zeros(())
    for step in range(window.start if window else args.iters):
        with timer.step():
            loss = train_step(images[step % 4], labels[step % 4])
    if window:
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            for step in window:
                with timer.step():
                    loss = train_step(images[step % 4], labels[step % 4])
                prof.step()
        for step in range(window.stop, args.iters):
            with timer.step():
                loss = train_step(images[step % 4], labels[step % 4])
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)

    print(f"backend {args.backend} final loss {loss.item():.4f}")
    emit_result("compiled_step", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
