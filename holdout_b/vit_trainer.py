"""ViT-S/16 image-classification training with a small Trainer class.

The Trainer owns the model, AdamW, a warmup+cosine schedule and a per-layer
timing report (forward and backward time of every leaf module, printed at the
end of the run). Inputs are synthetic uint8 images kept on the device.
"""
import argparse
import collections
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, dim * 4)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, img, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)
        self.n = (img // patch) ** 2

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    def __init__(self, img=224, patch=16, dim=384, depth=12, heads=6, classes=1000):
        super().__init__()
        self.patch_embed = PatchEmbed(img, patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.patch_embed.n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


class LayerTimer:
    """Per-module forward/backward time, reported at the end of training."""

    def __init__(self, model, device, use_events):
        self.cuda = device.type == "cuda"
        self.use_events = use_events and self.cuda
        self.open = {}
        self.pending = []
        self.total = collections.defaultdict(float)
        for name, mod in model.named_modules():
            if name and not any(True for _ in mod.children()):
                mod.register_forward_pre_hook(self._start(name + ":fwd"))
                mod.register_forward_hook(self._stop(name + ":fwd"))
                mod.register_full_backward_pre_hook(self._start(name + ":bwd"))
                mod.register_full_backward_hook(self._stop(name + ":bwd"))

    def _start(self, key):
        def hook(*_):
            if self.use_events:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self.open[key] = ev
            else:
                if self.cuda:
                    torch.cuda.synchronize()
                self.open[key] = time.perf_counter()
        return hook

    def _stop(self, key):
        def hook(*_):
            start = self.open.pop(key, None)
            if start is None:
                return
            if self.use_events:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self.pending.append((key, start, ev))
            else:
                if self.cuda:
                    torch.cuda.synchronize()
                self.total[key] += (time.perf_counter() - start) * 1e3
        return hook

    def report(self, top=5):
        if self.pending:
            torch.cuda.synchronize()
            for key, a, b in self.pending:
                self.total[key] += a.elapsed_time(b)
            self.pending.clear()
        rows = sorted(self.total.items(), key=lambda kv: -kv[1])[:top]
        return ", ".join(f"{k} {v:.1f} ms" for k, v in rows)


class Trainer:
    def __init__(self, model, device, args, cfg):
        self.model = model
        self.device = device
        self.cuda = device.type == "cuda"
        self.cfg = cfg
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05,
                                     betas=(0.9, 0.999), fused=self.cuda)
        warm, total = 5, max(args.iters, 10)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
        self.timer = LayerTimer(model, device, use_events=args.fixed)
        g = torch.Generator(device=device)
        g.manual_seed(0)
        b, img = cfg["batch"], cfg["img"]
        self.images = torch.randint(0, 256, (4, b, 3, img, img), dtype=torch.uint8, device=device, generator=g)
        self.labels = torch.randint(0, cfg["classes"], (4, b), device=device, generator=g)
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
        self.loss_acc = torch.zeros((), device=device)

    def train_step(self, step):
        x = (self.images[step % 4].float() - self.mean) / self.std
        y = self.labels[step % 4]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
            loss = F.cross_entropy(self.model(x), y, label_smoothing=0.1)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        self.loss_acc += loss.detach()

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def fit(self, iters, trace=None, trace_iters=5, et_path=None):
        profiling = bool(trace or et_path)
        k = min(trace_iters, iters)
        win = max(0, min(10, iters - k)) if profiling else iters
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        t0 = t1 = None
        step = 0
        while step < iters:
            if step == win:
                et = None
                if et_path:
                    et = torch.profiler.ExecutionTraceObserver()
                    et.register_callback(et_path)
                    et.start()
                with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
                    for _ in range(k):
                        self.train_step(step)
                        prof.step()
                        step += 1
                if trace:
                    prof.export_chrome_trace(trace)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
                continue
            if step == 5:
                self._sync()
                t0 = time.perf_counter()
            self.train_step(step)
            step += 1
            if step == win and t0 is not None:
                self._sync()
                t1 = time.perf_counter()
        self._sync()
        n = win - 5
        return (t1 - t0) * 1e3 / n if (t0 is not None and t1 is not None and n > 0) else None, win


def main():
    ap = argparse.ArgumentParser(description="ViT-S/16 training")
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et")
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    if dev.type == "cuda":
        cfg = dict(batch=128, img=224, patch=16, dim=384, depth=12, heads=6, classes=1000)
    else:
        cfg = dict(batch=8, img=32, patch=8, dim=64, depth=2, heads=2, classes=10)
    model = ViT(cfg["img"], cfg["patch"], cfg["dim"], cfg["depth"], cfg["heads"], cfg["classes"]).to(dev)
    trainer = Trainer(model, dev, args, cfg)
    iter_ms, win = trainer.fit(args.iters, args.trace, args.trace_iters, args.et)
    print(f"vit_trainer: mean loss {trainer.loss_acc.item() / args.iters:.4f}")
    print("slowest modules:", trainer.timer.report())
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "vit_trainer",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": f"perf_counter with cuda.synchronize at both ends of iterations 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
