"""ImageNet-style classifier training with a multi-worker numpy data pipeline.

Samples are decoded images (held in an in-memory uint8 bank here), randomly
cropped and flipped in numpy inside DataLoader workers, normalised with the
ImageNet mean/std and collated into batches that are copied to the GPU from
pinned memory. Model: a compact ResNet, bf16 autocast, channels_last, SGD
with Nesterov momentum.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


class BankDataset(Dataset):
    def __init__(self, bank, labels, crop, length, normalize_in_worker):
        self.bank, self.labels, self.crop, self.length = bank, labels, crop, length
        self.normalize = normalize_in_worker

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = self.bank[i % len(self.bank)]
        h, w, _ = img.shape
        y, x = rng.integers(0, h - self.crop + 1), rng.integers(0, w - self.crop + 1)
        img = img[y:y + self.crop, x:x + self.crop]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        if self.normalize:
            img = (img / 255.0 - MEAN) / STD
        chw = np.ascontiguousarray(img.transpose(2, 0, 1))
        return torch.from_numpy(chw), int(self.labels[i % len(self.labels)])


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + idt)


class SmallResNet(nn.Module):
    def __init__(self, widths=(32, 64, 128, 256), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(Basic(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))


def main():
    ap = argparse.ArgumentParser(description="image classifier training")
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et")
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    if cuda:
        n_bank, src, crop, batch, workers, classes = 512, 256, 224, 128, 8, 1000
        torch.backends.cudnn.benchmark = True
    else:
        n_bank, src, crop, batch, workers, classes = 64, 72, 64, 8, 2, 10
        torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    bank = rng.integers(0, 256, (n_bank, src, src, 3), dtype=np.uint8)
    labels = rng.integers(0, classes, n_bank)

    ds = BankDataset(bank, labels, crop, length=batch * (args.iters + 8), normalize_in_worker=not args.fixed)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=cuda,
                        drop_last=True, persistent_workers=True, prefetch_factor=2)

    model = SmallResNet(classes=classes).to(dev)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-5)
    mean = torch.tensor(MEAN * 255, dtype=torch.float32, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(STD * 255, dtype=torch.float32, device=dev).view(1, 3, 1, 1)

    def train_step(x, y):
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        if x.dtype == torch.uint8:
            x = (x.float() - mean) / std
        else:
            x = x.float()
        if cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    ev = {}

    def mark(name):
        if cuda:
            ev[name] = torch.cuda.Event(enable_timing=True)
            ev[name].record()
        else:
            ev[name] = time.perf_counter()

    total = torch.zeros((), device=dev)
    prof = et = None
    for i, (x, y) in enumerate(loader):
        if i == args.iters:
            break
        if i == 5 and win > 5:
            mark("start")
        if i == win and profiling:
            if win > 5:
                mark("end")
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
            prof.start()
        total += train_step(x, y)
        if prof is not None:
            prof.step()
            if i == win + k - 1:
                prof.stop()
                if args.trace:
                    prof.export_chrome_trace(args.trace)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
                prof = None
    if "start" in ev and "end" not in ev:
        mark("end")
    if cuda:
        torch.cuda.synchronize()
    del loader
    iter_ms = None
    if "start" in ev:
        span = ev["start"].elapsed_time(ev["end"]) if cuda else (ev["end"] - ev["start"]) * 1e3
        iter_ms = span / (win - 5)
    print(f"image_classifier: mean loss {total.item() / args.iters:.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "image_classifier",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": ("CUDA events" if cuda else "perf_counter") + f" recorded before iterations 5 and {win}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
