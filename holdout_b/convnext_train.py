"""ConvNeXt-style image classifier training with gradient accumulation.

ConvNeXt blocks (7x7 depthwise conv, LayerNorm, inverted MLP, layer scale),
channels_last activations, bf16 autocast, fused AdamW with a cosine schedule,
two micro-batches per optimizer step. Images are a device-resident synthetic
uint8 pool, so the step measures the model alone.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over channels of an NCHW tensor (permute to NHWC and back)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim, ls_init=1e-6):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), ls_init))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims=(64, 128, 256, 512), depths=(2, 2, 4, 2), classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        stages = []
        for i, (d, n) in enumerate(zip(dims, depths)):
            layers = []
            if i > 0:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
            layers += [ConvNeXtBlock(d) for _ in range(n)]
            stages.append(nn.Sequential(*layers))
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(self.norm(x.mean((2, 3))))


def main():
    ap = argparse.ArgumentParser(description="ConvNeXt training")
    ap.add_argument("--fixed", action="store_true", help="accepted for interface compatibility; no effect")
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
        micro, accum, img, classes, dims, depths = 96, 2, 192, 1000, (64, 128, 256, 512), (2, 2, 4, 2)
        torch.backends.cudnn.benchmark = True
    else:
        micro, accum, img, classes, dims, depths = 4, 2, 32, 10, (8, 16, 32, 32), (1, 1, 1, 1)

    fmt = torch.channels_last if cuda else torch.contiguous_format
    model = ConvNeXt(dims, depths, classes).to(dev, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05, fused=cuda)
    total_steps = max(args.iters, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / total_steps)))

    g = torch.Generator(device=dev)
    g.manual_seed(0)
    pool = torch.randint(0, 256, (8, micro, 3, img, img), dtype=torch.uint8, device=dev, generator=g)
    pool = pool.view(8 * micro, 3, img, img).contiguous(memory_format=fmt).view(8, micro, 3, img, img)
    targets = torch.randint(0, classes, (8, micro), device=dev, generator=g)
    mean = torch.tensor([123.7, 116.3, 103.5], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4], device=dev).view(1, 3, 1, 1)
    running = torch.zeros((), device=dev)

    def train_step(i):
        nonlocal running
        opt.zero_grad(set_to_none=True)
        for m in range(accum):
            j = (i * accum + m) % 8
            x = (pool[j].float() - mean) / std
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                loss = F.cross_entropy(model(x), targets[j], label_smoothing=0.1) / accum
            loss.backward()
            running += loss.detach()
        opt.step()
        sched.step()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    marks = {}
    prof = et = None
    for i in range(args.iters):
        if i == 5 or (i == win and win > 5):
            if cuda:
                marks[i] = torch.cuda.Event(enable_timing=True)
                marks[i].record()
            else:
                marks[i] = time.perf_counter()
        if i == win and profiling:
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
            prof.start()
        train_step(i)
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
    if win == args.iters and win > 5:
        if cuda:
            marks[win] = torch.cuda.Event(enable_timing=True)
            marks[win].record()
        else:
            marks[win] = time.perf_counter()
    if cuda:
        torch.cuda.synchronize()
    iter_ms = None
    if 5 in marks and win in marks and win > 5:
        a, b = marks[5], marks[win]
        iter_ms = (a.elapsed_time(b) if cuda else (b - a) * 1e3) / (win - 5)
    print(f"convnext_train: mean loss {running.item() / args.iters:.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "convnext_train",
        "fixes": [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": ("CUDA events" if cuda else "perf_counter") + f" recorded before iterations 5 and {win}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
