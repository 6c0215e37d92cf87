"""ResNet-18 training from an in-RAM image dataset through a torch DataLoader.

The dataset stands in for already-decoded images (uint8, CHW) kept in host
memory; __getitem__ does a torchvision-style random crop and horizontal flip.
Normalisation happens on the GPU. Model runs in bf16 autocast, channels_last.

    python resnet18_loader.py            # loader as first written
    python resnet18_loader.py --fixed    # tuned loader
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset


class DecodedImages(Dataset):
    def __init__(self, n_images: int, size: int, crop: int, n_classes: int, length: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n_images, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, n_classes, (n_images,), generator=g)
        self.size, self.crop, self.length, self.seed = size, crop, length, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        rng = random.Random(self.seed * 1_000_003 + index)
        j = index % self.images.shape[0]
        top = rng.randint(0, self.size - self.crop)
        left = rng.randint(0, self.size - self.crop)
        img = self.images[j, :, top:top + self.crop, left:left + self.crop]
        if rng.random() < 0.5:
            img = img.flip(-1)
        return img.contiguous(), self.labels[j]


class Stopwatch:
    """Wall clock over ranges of iterations, synchronising the GPU at both ends of each range."""

    def __init__(self, device: torch.device):
        self.device = device
        self.total = 0.0
        self.count = 0
        self._t0 = None

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self):
        self._sync()
        self._t0 = time.perf_counter()

    def stop(self, n_iters: int):
        self._sync()
        self.total += time.perf_counter() - self._t0
        self.count += n_iters

    @property
    def ms_per_iter(self) -> float:
        return 1e3 * self.total / max(1, self.count)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="worker processes, pinned memory, non-blocking copies")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    if cuda:
        torch.backends.cudnn.benchmark = True

    if cuda:
        batch, size, crop, n_classes, n_images, workers = args.batch_size or 128, 256, 224, 1000, 256, 6
    else:
        batch, size, crop, n_classes, n_images, workers = args.batch_size or 8, 40, 32, 10, 32, 2

    ds = DecodedImages(n_images, size, crop, n_classes, length=args.iters * batch)
    if args.fixed:
        loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=cuda,
                            persistent_workers=True, prefetch_factor=4, drop_last=True,
                            generator=torch.Generator().manual_seed(1))
    else:
        loader = DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(1))

    model = torchvision.models.resnet18(num_classes=n_classes).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True, weight_decay=5e-5)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    amp_dtype = torch.bfloat16

    def train_step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if args.fixed:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        else:
            images = images.to(device)
            labels = labels.to(device)
        x = ((images.float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=cuda):
            out = model(x)
            loss = F.cross_entropy(out, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    k = min(args.trace_iters, args.iters)
    traced = bool(args.trace or args.et)
    p0 = (10 if args.iters >= 10 + k else max(0, args.iters - k)) if traced else args.iters
    warm = min(5, p0)

    batches = iter(loader)
    clock = Stopwatch(device)
    model.train()
    loss = None

    def run(n: int):
        nonlocal loss
        for _ in range(n):
            images, labels = next(batches)
            loss = train_step(images, labels)

    run(warm)
    clock.start()
    run(p0 - warm)
    clock.stop(p0 - warm)
    if traced:
        et = None
        if args.et:
            et = ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            run(k)
        if et is not None:
            et.stop()
            et.unregister_callback()
        if args.trace:
            prof.export_chrome_trace(args.trace)
        rest = args.iters - p0 - k
        if clock.count:
            run(rest)  # not timed: the profiler can leave overhead behind
        else:  # nothing was timed before the profiled window
            clock.start()
            run(rest)
            clock.stop(rest)

    print(f"resnet18 batch={batch} crop={crop} workers={loader.num_workers} pin={loader.pin_memory}: "
          f"{clock.ms_per_iter:.2f} ms/step, {batch / clock.ms_per_iter * 1e3:.0f} img/s, last loss {loss.item():.3f}")
    batches = None  # drop the iterator: shuts the worker processes down before reporting
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "resnet18_loader",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": clock.ms_per_iter,
        "timing": "wall clock over iteration ranges with cuda synchronize at both ends, mean",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
