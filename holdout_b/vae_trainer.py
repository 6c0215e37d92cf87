"""Convolutional VAE (spatial latent, SD-style) trained on synthetic textures.

Encoder: strided conv stages with GroupNorm/SiLU down to a 16x16x8 latent
(mean and log-variance); decoder mirrors it with nearest upsampling. Loss is
MSE reconstruction plus a small KL term, bf16 autocast, AdamW. At the end the
run prints a short device-memory report.
"""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser(description="conv VAE training")
ap.add_argument("--fixed", action="store_true")
ap.add_argument("--iters", type=int, default=40)
ap.add_argument("--device", default=None)
ap.add_argument("--trace")
ap.add_argument("--trace-iters", type=int, default=5)
ap.add_argument("--et")
ARGS = ap.parse_args()

if not ARGS.fixed:
    # memory report below should show what the model really holds, not cached blocks
    os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def norm(c):
    return nn.GroupNorm(min(32, c // 4), c)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1, self.c1 = norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class Encoder(nn.Module):
    def __init__(self, chans, z):
        super().__init__()
        layers = [nn.Conv2d(3, chans[0], 3, padding=1)]
        for i, c in enumerate(chans):
            layers.append(ResBlock(chans[max(i - 1, 0)], c))
            if i < len(chans) - 1:
                layers.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
        layers += [norm(chans[-1]), nn.SiLU(), nn.Conv2d(chans[-1], 2 * z, 3, padding=1)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).chunk(2, dim=1)


class Decoder(nn.Module):
    def __init__(self, chans, z):
        super().__init__()
        chans = chans[::-1]
        layers = [nn.Conv2d(z, chans[0], 3, padding=1)]
        for i, c in enumerate(chans):
            layers.append(ResBlock(chans[max(i - 1, 0)], c))
            if i < len(chans) - 1:
                layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c, c, 3, padding=1)]
        layers += [norm(chans[-1]), nn.SiLU(), nn.Conv2d(chans[-1], 3, 3, padding=1)]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z)


class VAE(nn.Module):
    def __init__(self, chans, z):
        super().__init__()
        self.enc, self.dec = Encoder(chans, z), Decoder(chans, z)

    def forward(self, x):
        mu, logvar = self.enc(x)
        logvar = logvar.clamp(-20, 10)
        zz = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(zz), mu, logvar


class VAETrainer:
    def __init__(self, model, dev, batch, size, beta=1e-3):
        self.model, self.dev, self.batch, self.size, self.beta = model, dev, batch, size, beta
        self.cuda = dev.type == "cuda"
        self.opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.5, 0.9), fused=self.cuda)
        self.loss_sum = torch.zeros((), device=dev)
        self.steps = 0

    def sample_batch(self):
        coarse = torch.rand(self.batch, 3, 8, 8, device=self.dev)
        x = F.interpolate(coarse, size=(self.size, self.size), mode="bicubic", align_corners=False)
        return (x * 2 - 1).clamp(-1, 1)

    def step(self):
        x = self.sample_batch()
        with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.cuda):
            recon, mu, logvar = self.model(x)
        rec = F.mse_loss(recon.float(), x)
        kl = -0.5 * torch.mean(1 + logvar.float() - mu.float().pow(2) - logvar.float().exp())
        loss = rec + self.beta * kl
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.loss_sum += loss.detach()
        self.steps += 1

    def run(self, iters, trace=None, trace_iters=5, et_path=None):
        profiling = bool(trace or et_path)
        k = min(trace_iters, iters)
        win = max(0, min(10, iters - k)) if profiling else iters
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if self.cuda else [])
        start = end = None
        for i in range(iters):
            if i == 5 and win > 5:
                if self.cuda:
                    start = torch.cuda.Event(enable_timing=True)
                    start.record()
                t_start = time.perf_counter()
            if i == win and profiling:
                et = None
                if et_path:
                    et = torch.profiler.ExecutionTraceObserver()
                    et.register_callback(et_path)
                    et.start()
                prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
                prof.start()
            self.step()
            if i == win - 1 and win > 5:
                if self.cuda:
                    end = torch.cuda.Event(enable_timing=True)
                    end.record()
                t_end = time.perf_counter()
            if profiling and i == win + k - 1:
                prof.stop()
                if trace:
                    prof.export_chrome_trace(trace)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
        if self.cuda:
            torch.cuda.synchronize()
        if win <= 5:
            return None, win
        if self.cuda:
            return start.elapsed_time(end) / (win - 5), win
        return (t_end - t_start) * 1e3 / (win - 5), win


def main():
    dev = torch.device(ARGS.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    if dev.type == "cuda":
        chans, z, batch, size = (64, 128, 256, 256), 8, 48, 128
        torch.backends.cudnn.benchmark = True
    else:
        chans, z, batch, size = (8, 16, 16, 16), 4, 4, 32
    model = VAE(chans, z).to(dev)
    trainer = VAETrainer(model, dev, batch, size)
    iter_ms, win = trainer.run(ARGS.iters, ARGS.trace, ARGS.trace_iters, ARGS.et)
    mean_loss = trainer.loss_sum.item() / trainer.steps
    mem = ""
    if dev.type == "cuda":
        mem = f", peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"
    print(f"vae_trainer: mean loss {mean_loss:.4f}{mem}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "vae_trainer",
        "fixes": ["all"] if ARGS.fixed else [],
        "iters": ARGS.iters,
        "iter_ms": iter_ms,
        "timing": (f"CUDA events recorded before iteration 5 and after iteration {win - 1}" if dev.type == "cuda"
                   else f"perf_counter before iteration 5 and after iteration {win - 1}"),
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
