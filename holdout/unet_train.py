"""UNet semantic segmentation, trained on random images and masks with Adam.

Fixes (repeatable):
  --fix cache   stop calling torch.cuda.empty_cache() after every step
  --fix amp     bf16 autocast + channels_last for the conv net
  --fixed       both
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

ALL_FIXES = ["amp", "cache"]


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, in_ch: int = 3, n_classes: int = 6, base: int = 64, depth: int = 4):
        super().__init__()
        chs = [base * 2 ** i for i in range(depth)]
        self.down = nn.ModuleList()
        c = in_ch
        for ch in chs:
            self.down.append(double_conv(c, ch))
            c = ch
        self.bottleneck = double_conv(chs[-1], chs[-1] * 2)
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        c = chs[-1] * 2
        for ch in reversed(chs):
            self.up.append(nn.ConvTranspose2d(c, ch, kernel_size=2, stride=2))
            self.dec.append(double_conv(2 * ch, ch))
            c = ch
        self.head = nn.Conv2d(chs[0], n_classes, 1)

    def forward(self, x):
        skips = []
        for blk in self.down:
            x = blk(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.head(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="apply all fixes")
    ap.add_argument("--fix", action="append", default=[], choices=ALL_FIXES, metavar="{amp,cache}",
                    help="apply one fix (repeatable): 'cache' = no empty_cache() per step, "
                         "'amp' = bf16 autocast + channels_last")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()
    fixes = sorted(ALL_FIXES if args.fixed else set(args.fix))
    use_amp = "amp" in fixes
    keep_cache = "cache" in fixes

    dev = torch.device(args.device)
    on_gpu = dev.type == "cuda"
    torch.manual_seed(7)
    if on_gpu:
        batch, res, base = 4, 256, 64
    else:
        batch, res, base = 2, 64, 8
    n_classes = 6

    model = UNet(3, n_classes, base).to(dev)
    fmt = torch.channels_last if (use_amp and on_gpu) else torch.contiguous_format
    model = model.to(memory_format=fmt)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    images = torch.randn(2, batch, 3, res, res, device=dev)
    masks = torch.randint(0, n_classes, (2, batch, res, res), device=dev)

    def amp_ctx():
        if use_amp and on_gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def train_step(i: int):
        x = images[i % 2].contiguous(memory_format=fmt)
        y = masks[i % 2]
        optimizer.zero_grad(set_to_none=True)
        with amp_ctx():
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        if not keep_cache:
            torch.cuda.empty_cache()  # keep memory fragmentation down
        return loss.detach()

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    k = min(args.trace_iters, args.iters)
    tracing = bool(args.trace or args.et)
    p0 = 10 if args.iters >= 10 + k else max(0, args.iters - k)
    profiled = range(p0, p0 + k) if tracing else range(0)

    # timed range: [5, p0) when tracing (before the profiled window), else [5, iters)
    timed_ranges = [(5, p0)] if tracing else [(5, args.iters)]  # profiling can slow what follows
    starts = {a: b for a, b in timed_ranges if b > a}
    ends = {b: a for a, b in timed_ranges if b > a}
    total_s, n_timed = 0.0, 0
    t0 = None
    losses = []

    i = 0
    while i < args.iters:
        if i in starts:
            sync()
            t0 = time.perf_counter()
        if tracing and i == p0:
            et = None
            if args.et:
                et = ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_gpu else [ProfilerActivity.CPU],
                         record_shapes=True, with_stack=True) as prof:
                for j in profiled:
                    losses.append(train_step(j))
            if et is not None:
                et.stop()
                et.unregister_callback()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            i = profiled.stop
        else:
            losses.append(train_step(i))
            i += 1
        if i in ends and t0 is not None:
            sync()
            total_s += time.perf_counter() - t0
            n_timed += i - ends[i]
            t0 = None

    if n_timed == 0:  # very short runs
        sync()
        t = time.perf_counter()
        losses.append(train_step(0))
        sync()
        total_s, n_timed = time.perf_counter() - t, 1
    iter_ms = 1e3 * total_s / n_timed
    peak = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else 0.0
    print(f"unet batch {batch}x{res}^2 fixes={fixes}: {iter_ms:.2f} ms/step, peak alloc {peak:.1f} GiB, "
          f"loss {losses[0].item():.3f} -> {losses[-1].item():.3f}")
    print("HOLDOUT_RESULT " + json.dumps({"program": "unet_train", "fixes": fixes, "iters": args.iters,
                                          "iter_ms": iter_ms,
                                          "timing": "wall clock over iteration ranges, synchronize at both ends, mean"}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
