"""MobileNetV2 training with RandomResizedCrop / flip / colour-jitter augmentation.

The source images are a pool of decoded uint8 HWC arrays (what PIL or cv2 hands
you). Each step draws a batch, augments every sample, normalises, and trains.

    python mobilenet_pil_aug.py           # per-sample PIL + numpy augmentation on the host
    python mobilenet_pil_aug.py --fixed   # batched augmentation on the GPU (affine_grid/grid_sample)
"""
import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
SCALE = (0.35, 1.0)
RATIO = (3 / 4, 4 / 3)


# ----------------------------------------------------------------------------- host path
def random_resized_crop_box(rng, h, w):
    area = h * w
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(rng.integers(0, h - ch + 1))
            left = int(rng.integers(0, w - cw + 1))
            return left, top, left + cw, top + ch
    return 0, 0, w, h


def augment_on_host(img, rng, out_size):
    h, w, _ = img.shape
    pil = Image.fromarray(img)
    pil = pil.resize((out_size, out_size), resample=Image.BILINEAR, box=random_resized_crop_box(rng, h, w))
    if rng.random() < 0.5:
        pil = pil.transpose(Image.FLIP_LEFT_RIGHT)
    x = np.asarray(pil, dtype=np.float32) / 255.0
    # colour jitter: brightness then contrast
    x = x * rng.uniform(0.8, 1.2)
    m = x.mean()
    x = (x - m) * rng.uniform(0.8, 1.2) + m
    x = np.clip(x, 0.0, 1.0)
    x = (x - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def host_batch(pool, labels, rng, batch, out_size, device):
    idx = rng.integers(0, len(pool), size=batch)
    xs = np.stack([augment_on_host(pool[i], rng, out_size) for i in idx])
    x = torch.from_numpy(xs).to(device)
    y = torch.from_numpy(labels[idx]).to(device)
    return x.contiguous(memory_format=torch.channels_last), y


# ----------------------------------------------------------------------------- device path
class GpuAugment:
    def __init__(self, pool, labels, out_size, device, seed=0):
        self.pool = torch.from_numpy(np.stack(pool)).permute(0, 3, 1, 2).contiguous().to(device)  # N,3,H,W uint8
        self.labels = torch.from_numpy(labels).to(device)
        self.out = out_size
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.mean = torch.from_numpy(MEAN).to(device).view(1, 3, 1, 1)
        self.std = torch.from_numpy(STD).to(device).view(1, 3, 1, 1)

    def rand(self, n, lo, hi):
        return torch.rand(n, device=self.pool.device, generator=self.gen) * (hi - lo) + lo

    def __call__(self, batch):
        dev = self.pool.device
        _, _, h, w = self.pool.shape
        idx = torch.randint(0, self.pool.shape[0], (batch,), device=dev, generator=self.gen)
        scale = self.rand(batch, *SCALE)
        aspect = torch.exp(self.rand(batch, math.log(RATIO[0]), math.log(RATIO[1])))
        cw = torch.sqrt(scale * aspect).clamp(max=1.0)  # crop width as a fraction of the image
        ch = torch.sqrt(scale / aspect).clamp(max=1.0)
        cx = (torch.rand(batch, device=dev, generator=self.gen) * 2 - 1) * (1 - cw)
        cy = (torch.rand(batch, device=dev, generator=self.gen) * 2 - 1) * (1 - ch)
        flip = torch.where(torch.rand(batch, device=dev, generator=self.gen) < 0.5, -1.0, 1.0)
        theta = torch.zeros(batch, 2, 3, device=dev)
        theta[:, 0, 0] = cw * flip
        theta[:, 0, 2] = cx
        theta[:, 1, 1] = ch
        theta[:, 1, 2] = cy
        src = self.pool[idx].float().div_(255.0)
        grid = F.affine_grid(theta, [batch, 3, self.out, self.out], align_corners=False)
        x = F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=False)
        x = x * self.rand(batch, 0.8, 1.2).view(-1, 1, 1, 1)
        m = x.mean(dim=(1, 2, 3), keepdim=True)
        x = (x - m) * self.rand(batch, 0.8, 1.2).view(-1, 1, 1, 1) + m
        x = x.clamp_(0.0, 1.0)
        x = (x - self.mean) / self.std
        return x.contiguous(memory_format=torch.channels_last), self.labels[idx]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="do the augmentation batched on the GPU")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    batch, src_size, out_size, pool_n, n_cls = (32, 224, 160, 48, 100) if cuda else (4, 80, 64, 8, 10)
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    pool = [rng.integers(0, 256, size=(src_size, src_size, 3), dtype=np.uint8) for _ in range(pool_n)]
    labels = rng.integers(0, n_cls, size=pool_n).astype(np.int64)

    model = torchvision.models.mobilenet_v2(num_classes=n_cls).to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    gpu_aug = GpuAugment(pool, labels, out_size, device) if args.fixed else None

    def step():
        if gpu_aug is not None:
            x, y = gpu_aug(batch)
        else:
            x, y = host_batch(pool, labels, rng, batch, out_size, device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    k = min(args.trace_iters, args.iters)
    traced = bool(args.trace or args.et)
    p0 = 10 if args.iters >= 10 + k else max(0, args.iters - k)
    window = range(p0, p0 + k) if traced else range(0)

    if cuda:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters + 1)]
        stamp = lambda i: ev[i].record()  # noqa: E731
    else:
        ev = [0.0] * (args.iters + 1)

        def stamp(i):
            ev[i] = time.perf_counter()

    i = 0
    while i < args.iters:
        if i == window.start and traced:
            et = None
            if args.et:
                et = ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU],
                         record_shapes=True, with_stack=True) as prof:
                for j in window:
                    stamp(j)
                    loss = step()
                    prof.step()
                stamp(window.stop)
            if et is not None:
                et.stop()
                et.unregister_callback()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            i = window.stop
            continue
        stamp(i)
        loss = step()
        i += 1
    stamp(args.iters)

    if cuda:
        torch.cuda.synchronize()
        dt = [ev[j].elapsed_time(ev[j + 1]) for j in range(args.iters)]
    else:
        dt = [(ev[j + 1] - ev[j]) * 1e3 for j in range(args.iters)]
    steady = [t for j, t in enumerate(dt) if j >= 5 and (not traced or j < window.start)] or \
        [t for j, t in enumerate(dt) if j not in window] or dt
    iter_ms = statistics.median(steady)
    print(f"mobilenet_v2 batch {batch} @ {out_size}px: {iter_ms:.2f} ms/step (median), loss {loss.item():.3f}")
    print("HOLDOUT_RESULT " + json.dumps({"program": "mobilenet_pil_aug", "fixes": ["all"] if args.fixed else [],
                                          "iters": args.iters, "iter_ms": iter_ms,
                                          "timing": "CUDA events between iterations, median"}), file=sys.stderr)


if __name__ == "__main__":
    main()
