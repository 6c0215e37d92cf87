"""``for x, y in DataLoader(dataset, batch_size=..., num_workers=N)`` over a map-style Dataset.

Each ``__getitem__`` does a little CPU work (builds a seeded random image,
random-crops, flips and normalises it).  ``--workers`` sets num_workers
(default 2; 0 loads in the main process).  A step is one batch: waiting for
the batch from the loader plus the training step on it, so ``step_ms`` is the
loop's period; step 0 includes starting the workers.  The profiler is entered
when step ``--trace-start`` begins and left after the last profiled step;
prof.step() is called after each profiled step.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset

from _loop_common import StepTimer, base_parser, emit_result, parse_args, resolve_device, trace_window


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """Deterministic pseudo-images: item ``i`` is generated from seed ``base_seed + i``."""

    MEAN = torch.tensor([0.5, 0.45, 0.4]).view(3, 1, 1)
    STD = torch.tensor([0.25, 0.25, 0.25]).view(3, 1, 1)

    def __init__(self, length: int, size: int = 32, pad: int = 4, n_classes: int = 10, base_seed: int = 0) -> None:
        self.length = length
        self.size = size
        self.pad = pad
        self.n_classes = n_classes
        self.base_seed = base_seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.base_seed + index)
        label = int(torch.randint(0, self.n_classes, (1,), generator=g))
        full = self.size + 2 * self.pad
        # Smooth-ish random image: low-res noise upsampled, plus a class-dependent tint.
        low = torch.rand(1, 3, full // 4, full // 4, generator=g)
        img = F.interpolate(low, size=(full, full), mode="bilinear", align_corners=False)[0]
        img = (img + 0.1 * label / self.n_classes).clamp(0, 1)
        top, left = torch.randint(0, 2 * self.pad + 1, (2,), generator=g).tolist()
        img = img[:, top : top + self.size, left : left + self.size]
        if torch.rand((), generator=g) < 0.5:
            img = img.flip(-1)
        return (img - self.MEAN) / self.STD, label


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(64, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader num_workers (0: main process)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 32 on CPU, 256 on CUDA")
    args = parse_args(parser)
    device = resolve_device(args.device)
    torch.manual_seed(args.seed)

    batch_size = args.batch_size or (32 if device.type == "cpu" else 256)
    dataset = SyntheticImages(length=args.iters * batch_size, base_seed=args.seed)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
    )
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    timer = StepTimer(device)

    window = trace_window(args)
    prof: profile | None = None
    model.train()
    correct = torch.zeros((), device=device, dtype=torch.long)
    with ExitStack() as stack:
        timer.start()  # step 0 starts with the first fetch from the loader
        for step, (x, y) in enumerate(loader):
            if window and step == window.start:
                activities = [ProfilerActivity.CPU]
                if device.type == "cuda":
                    activities.append(ProfilerActivity.CUDA)
                prof = stack.enter_context(
                    profile(activities=activities, record_shapes=True, with_stack=True)
                )
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == y).sum()
            timer.stop()
            if prof is not None and step in window:
                prof.step()
                if step == window.stop - 1:
                    stack.close()
            if step + 1 == args.iters:
                break
            timer.start()

    if prof is not None:
        Path(args.trace).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(args.trace)
    print(f"train accuracy {correct.item() / (args.iters * batch_size):.3f} with {args.workers} workers")
    emit_result("dataloader_loop", timer.step_ms(), list(window), timer.period_ms())


if __name__ == "__main__":
    main()
