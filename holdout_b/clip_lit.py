"""Contrastive tuning of image/text projection heads on frozen features.

LiT-style setup: the backbones are frozen, so each step samples a batch of
paired, precomputed image and caption embeddings from an in-memory feature
bank, runs them through two compiled MLP projection towers and optimises the
symmetric InfoNCE objective with a learnable temperature.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Tower(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(d_in),
            nn.Linear(d_in, d_hidden),
            nn.GELU(),
            nn.Linear(d_hidden, d_hidden),
            nn.GELU(),
            nn.Linear(d_hidden, d_out),
        )

    def forward(self, x):
        return self.net(x)


def contrastive_loss(img_emb, txt_emb, logit_scale, exact):
    if exact:
        img = F.normalize(img_emb.double(), dim=-1)
        txt = F.normalize(txt_emb.double(), dim=-1)
        logits = logit_scale.exp().clamp(max=100).double() * (img @ txt.t())
    else:
        img = F.normalize(img_emb.float(), dim=-1)
        txt = F.normalize(txt_emb.float(), dim=-1)
        logits = (logit_scale.exp().clamp(max=100) * (img @ txt.t())).float()
    target = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))


def main():
    ap = argparse.ArgumentParser(description="LiT-style contrastive head tuning")
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
        bank, batch, d_feat, d_hid, d_emb = 65536, 8192, 768, 2048, 1024
    else:
        bank, batch, d_feat, d_hid, d_emb = 4096, 256, 64, 128, 64

    # frozen features: captions are a noisy linear view of the image features
    feat_dtype = torch.bfloat16 if cuda else torch.float32
    img_bank = torch.randn(bank, d_feat, device=dev)
    mix = torch.randn(d_feat, d_feat, device=dev) / math.sqrt(d_feat)
    txt_bank = (img_bank @ mix + 0.5 * torch.randn(bank, d_feat, device=dev)).to(feat_dtype)
    img_bank = img_bank.to(feat_dtype)

    img_tower = Tower(d_feat, d_hid, d_emb).to(dev)
    txt_tower = Tower(d_feat, d_hid, d_emb).to(dev)
    logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07), device=dev))
    params = list(img_tower.parameters()) + list(txt_tower.parameters()) + [logit_scale]
    opt = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.1, fused=cuda)

    backend = "inductor" if cuda else "aot_eager"
    img_fwd = torch.compile(img_tower, backend=backend)
    txt_fwd = torch.compile(txt_tower, backend=backend)
    exact = not args.fixed

    def step():
        idx = torch.randint(0, bank, (batch,), device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            zi = img_fwd(img_bank[idx])
            zt = txt_fwd(txt_bank[idx])
            loss = contrastive_loss(zi, zt, logit_scale, exact)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if (args.trace or args.et) else None
    last_timed = (win if win is not None else args.iters)

    marks = {}

    def mark(i):
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks[i] = ev
        else:
            marks[i] = time.perf_counter()

    prof = et = None
    history = []
    for it in range(args.iters):
        if it == win:
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            acts = [torch.profiler.ProfilerActivity.CPU]
            if cuda:
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
            prof.__enter__()
        if it in (5, last_timed):
            mark(it)
        history.append(step())
        if prof is not None:
            prof.step()
            if it == win + k - 1:
                prof.__exit__(None, None, None)
                if args.trace:
                    prof.export_chrome_trace(args.trace)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
                prof = None
    if last_timed == args.iters:
        mark(args.iters)
    if cuda:
        torch.cuda.synchronize()

    iter_ms = None
    if 5 in marks and last_timed > 5:
        a, b = marks[5], marks[last_timed]
        span = a.elapsed_time(b) if cuda else (b - a) * 1e3
        iter_ms = span / (last_timed - 5)
    print(f"clip_lit: batch {batch}, final loss {history[-1].item():.4f}, "
          f"temperature {1 / logit_scale.exp().item():.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "clip_lit",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": f"CUDA events recorded before iteration 5 and before iteration {last_timed}"
                  if cuda else f"perf_counter before iteration 5 and before iteration {last_timed}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
