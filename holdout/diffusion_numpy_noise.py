"""DDPM training of a small convolutional denoiser on 4x64x64 latents.

The noise schedule and the forward-noising recipe follow a numpy reference
implementation: betas / alphas_cumprod as numpy arrays, timesteps and
Gaussian noise drawn with numpy, sinusoidal timestep embeddings in numpy.
Latents already live on the GPU. One iteration = one optimizer step.

    python diffusion_numpy_noise.py           # noise/timesteps/embeddings made on the host each step
    python diffusion_numpy_noise.py --fixed   # the same sampled on the GPU with torch
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

T_STEPS = 1000
TEMB = 128


# ------------------------------------------------------------------ schedule (numpy reference)
betas = np.linspace(1e-4, 0.02, T_STEPS, dtype=np.float64)
alphas_cumprod = np.cumprod(1.0 - betas)
sqrt_ac = np.sqrt(alphas_cumprod)
sqrt_1m_ac = np.sqrt(1.0 - alphas_cumprod)


def timestep_embedding_np(t: np.ndarray, dim: int) -> np.ndarray:
    half = dim // 2
    freqs = np.exp(-math.log(10000.0) * np.arange(half, dtype=np.float64) / half)
    args = t[:, None].astype(np.float64) * freqs[None]
    return np.concatenate([np.cos(args), np.sin(args)], axis=1).astype(np.float32)


def timestep_embedding_torch(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1)


# ------------------------------------------------------------------ model
class ResBlock(nn.Module):
    def __init__(self, ch: int, temb: int):
        super().__init__()
        self.n1 = nn.GroupNorm(32, ch)
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.t = nn.Linear(temb, ch)
        self.n2 = nn.GroupNorm(32, ch)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(temb)[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return x + h


class Denoiser(nn.Module):
    def __init__(self, ch: int = 128, n_blocks: int = 3):
        super().__init__()
        self.temb = nn.Sequential(nn.Linear(TEMB, 4 * TEMB), nn.SiLU(), nn.Linear(4 * TEMB, 4 * TEMB))
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.blocks = nn.ModuleList(ResBlock(ch, 4 * TEMB) for _ in range(n_blocks))
        self.out = nn.Sequential(nn.GroupNorm(32, ch), nn.SiLU(), nn.Conv2d(ch, 4, 3, padding=1))

    def forward(self, x, t_emb):
        e = self.temb(t_emb)
        h = self.inp(x)
        for b in self.blocks:
            h = b(h, e)
        return self.out(h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="sample noise, timesteps and embeddings on the GPU")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch, res, ch, n_blocks = (64, 64, 128, 3) if cuda else (4, 16, 32, 1)
    torch.manual_seed(0)
    np.random.seed(0)
    gen = torch.Generator(device=device).manual_seed(0)

    latents = torch.randn(8, batch, 4, res, res, device=device, generator=gen)  # encoded dataset shard
    model = Denoiser(ch, n_blocks).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0)
    sqrt_ac_t = torch.tensor(sqrt_ac, dtype=torch.float32, device=device)
    sqrt_1m_ac_t = torch.tensor(sqrt_1m_ac, dtype=torch.float32, device=device)

    def make_noisy_batch(x0: torch.Tensor):
        b = x0.shape[0]
        if args.fixed:
            t = torch.randint(0, T_STEPS, (b,), device=device, generator=gen)
            noise = torch.randn(x0.shape, device=device, generator=gen)
            a = sqrt_ac_t[t].view(b, 1, 1, 1)
            s = sqrt_1m_ac_t[t].view(b, 1, 1, 1)
            temb = timestep_embedding_torch(t, TEMB)
        else:
            t = np.random.randint(0, T_STEPS, size=b)
            noise = torch.from_numpy(np.random.randn(*x0.shape).astype(np.float32)).to(device)
            a = torch.from_numpy(sqrt_ac[t].astype(np.float32)).to(device).view(b, 1, 1, 1)
            s = torch.from_numpy(sqrt_1m_ac[t].astype(np.float32)).to(device).view(b, 1, 1, 1)
            temb = torch.from_numpy(timestep_embedding_np(t, TEMB)).to(device)
        return a * x0 + s * noise, noise, temb

    def train_step(i: int) -> torch.Tensor:
        x0 = latents[i % latents.shape[0]]
        x_t, noise, temb = make_noisy_batch(x0)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            pred = model(x_t, temb)
        loss = F.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    K = min(args.trace_iters, args.iters)
    tracing = bool(args.trace or args.et)
    P0 = 10 if args.iters >= 10 + K else max(0, args.iters - K)
    traced_iters = set(range(P0, P0 + K)) if tracing else set()

    laps: list[tuple[int, object, object]] = []
    losses = []

    def lap(i: int):
        if cuda:
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            losses.append(train_step(i))
            e.record()
        else:
            s = time.perf_counter()
            losses.append(train_step(i))
            e = time.perf_counter()
        laps.append((i, s, e))

    for i in range(args.iters):
        if i in traced_iters:
            if i != P0:
                continue
            et = None
            if args.et:
                et = ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU],
                         record_shapes=True, with_stack=True) as prof:
                for j in sorted(traced_iters):
                    losses.append(train_step(j))
                    prof.step()
            if et is not None:
                et.stop()
                et.unregister_callback()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            continue
        lap(i)

    if cuda:
        torch.cuda.synchronize()
        ms = [(i, s.elapsed_time(e)) for i, s, e in laps]
    else:
        ms = [(i, (e - s) * 1e3) for i, s, e in laps]
    steady = [t for i, t in ms if i >= 5 and (not tracing or i < P0)] or [t for _, t in ms]
    iter_ms = statistics.median(steady)
    print(f"ddpm denoiser batch {batch} ({ch}ch @ {res}^2): {iter_ms:.2f} ms/step median; "
          f"loss {losses[0].item():.4f} -> {losses[-1].item():.4f}")
    print("HOLDOUT_RESULT " + json.dumps({"program": "diffusion_numpy_noise", "fixes": ["all"] if args.fixed else [],
                                          "iters": args.iters, "iter_ms": iter_ms,
                                          "timing": "CUDA event pair around each step, median"}), file=sys.stderr)


if __name__ == "__main__":
    main()
