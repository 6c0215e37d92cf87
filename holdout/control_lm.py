"""Control program: a decoder-only LM trained the way the performance guides say.

bf16 autocast, flash attention through scaled_dot_product_attention, fused
AdamW, token batches resident on the GPU, no host synchronisation inside the
loop (losses are kept on the device and read once at the end). There is no
planted problem: --fixed is accepted and changes nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile


@dataclass
class Config:
    vocab: int = 32768
    seq: int = 1024
    d: int = 1024
    heads: int = 16
    layers: int = 8
    batch: int = 8


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.heads = c.heads
        self.ln1 = nn.LayerNorm(c.d)
        self.qkv = nn.Linear(c.d, 3 * c.d, bias=False)
        self.proj = nn.Linear(c.d, c.d, bias=False)
        self.ln2 = nn.LayerNorm(c.d)
        self.fc1 = nn.Linear(c.d, 4 * c.d, bias=False)
        self.fc2 = nn.Linear(4 * c.d, c.d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.tok = nn.Embedding(c.vocab, c.d)
        self.pos = nn.Embedding(c.seq, c.d)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln = nn.LayerNorm(c.d)
        self.out = nn.Linear(c.d, c.vocab, bias=False)
        self.out.weight = self.tok.weight
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.out(self.ln(x))


class Trainer:
    def __init__(self, cfg: Config, device: torch.device):
        self.cfg, self.device = cfg, device
        self.cuda = device.type == "cuda"
        self.model = LM(cfg).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                     fused=self.cuda)
        g = torch.Generator(device=device).manual_seed(0)
        self.data = torch.randint(0, cfg.vocab, (4, cfg.batch, cfg.seq + 1), device=device, generator=g)
        self.losses = torch.zeros(0, device=device)
        self._loss_buf: list[torch.Tensor] = []

    def step(self, i: int):
        batch = self.data[i % self.data.shape[0]]
        inp, tgt = batch[:, :-1], batch[:, 1:]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
            logits = self.model(inp)
        loss = F.cross_entropy(logits.float().view(-1, self.cfg.vocab), tgt.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0, foreach=True)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self._loss_buf.append(loss.detach())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="no-op (control program)")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()

    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = Config() if device.type == "cuda" else Config(vocab=512, seq=64, d=64, heads=4, layers=2, batch=4)
    tr = Trainer(cfg, device)

    K = min(args.trace_iters, args.iters)
    tracing = bool(args.trace or args.et)
    P0 = 10 if args.iters >= 10 + K else max(0, args.iters - K)
    window = range(P0, P0 + K) if tracing else range(0)

    events = []  # (iteration, start, end)

    def timed(i):
        if tr.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            tr.step(i)
            e.record()
        else:
            s = time.perf_counter()
            tr.step(i)
            e = time.perf_counter()
        events.append((i, s, e))

    for i in range(0, window.start if tracing else args.iters):
        timed(i)
    if tracing:
        et = None
        if args.et:
            et = ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if tr.cuda else [ProfilerActivity.CPU],
                     record_shapes=True, with_stack=True) as prof:
            for i in window:
                tr.step(i)
                prof.step()
        if et is not None:
            et.stop()
            et.unregister_callback()
        if args.trace:
            prof.export_chrome_trace(args.trace)
        for i in range(window.stop, args.iters):
            timed(i)

    if tr.cuda:
        torch.cuda.synchronize()
        per = [(i, s.elapsed_time(e)) for i, s, e in events]
    else:
        per = [(i, (e - s) * 1e3) for i, s, e in events]
    # when tracing, time only the iterations before the profiled window
    steady = sorted(t for i, t in per if i >= 5 and (not tracing or i < P0)) or sorted(t for _, t in per)
    iter_ms = steady[len(steady) // 2]
    losses = torch.stack(tr._loss_buf).tolist()
    tokens = cfg.batch * cfg.seq
    print(f"control LM {cfg}: {iter_ms:.2f} ms/step median, {tokens / iter_ms * 1e3:.0f} tok/s, "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print("HOLDOUT_RESULT " + json.dumps({"program": "control_lm", "fixes": [],
                                          "iters": args.iters, "iter_ms": iter_ms,
                                          "timing": "CUDA event pair per step, median"}), file=sys.stderr)


if __name__ == "__main__":
    main()
