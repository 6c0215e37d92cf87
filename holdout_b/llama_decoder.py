"""LLaMA-style decoder-only LM pretraining step (RMSNorm, RoPE, SwiGLU, QK-norm).

Reference-style implementation: pre-norm blocks with RMSNorm, rotary position
embeddings on queries/keys, per-head RMSNorm on q and k, SwiGLU MLP, untied
output head; bf16 autocast with fp32 master weights and fused AdamW. Random
token batches stand in for the data loader.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rms_norm(x, weight, eps: float = 1e-6):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.type_as(x)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def swiglu(gate, up):
    return F.silu(gate) * up


OPS = {"rms_norm": rms_norm, "apply_rope": apply_rope, "swiglu": swiglu}


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return OPS["rms_norm"](x, self.weight)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.q_norm, self.k_norm = RMSNorm(self.hd), RMSNorm(self.hd)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q = self.q_norm(self.wq(x).view(b, t, self.h, self.hd)).transpose(1, 2)
        k = self.k_norm(self.wk(x).view(b, t, self.h, self.hd)).transpose(1, 2)
        v = self.wv(x).view(b, t, self.h, self.hd).transpose(1, 2)
        q, k = OPS["apply_rope"](q, k, cos, sin)
        o = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.w2(OPS["swiglu"](self.w1(x), self.w3(x)))


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(d), Attention(d, heads)
        self.ffn_norm, self.ffn = RMSNorm(d), FeedForward(d, hidden)

    def forward(self, x, cos, sin):
        h = x + self.attn(self.attn_norm(x), cos, sin)
        return h + self.ffn(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, vocab, d, layers, heads, hidden, ctx, rope_dtype):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat([freqs, freqs], -1)
        self.register_buffer("cos", emb.cos().to(rope_dtype), persistent=False)
        self.register_buffer("sin", emb.sin().to(rope_dtype), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.out(self.norm(x))


def main():
    ap = argparse.ArgumentParser(description="LLaMA-style LM training")
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
        vocab, d, layers, heads, hidden, ctx, batch = 32000, 1024, 4, 16, 2816, 1024, 8
    else:
        vocab, d, layers, heads, hidden, ctx, batch = 256, 32, 2, 2, 96, 32, 2

    if args.fixed:
        backend = "inductor" if cuda else "aot_eager"
        for name in list(OPS):
            OPS[name] = torch.compile(OPS[name], backend=backend)

    model = Transformer(vocab, d, layers, heads, hidden, ctx, torch.bfloat16 if cuda else torch.float32).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    data = torch.randint(0, vocab, (4, batch, ctx + 1), device=dev)

    def step(i):
        seq = data[i % 4]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, vocab), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    pairs, losses = [], []
    prof = et = None
    for i in range(args.iters):
        if i == win and profiling:
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
            prof.__enter__()
        timed = 5 <= i < win
        if timed:
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            else:
                a = time.perf_counter()
        losses.append(step(i))
        if timed:
            if cuda:
                b.record()
                pairs.append((a, b))
            else:
                pairs.append((time.perf_counter() - a) * 1e3)
        if prof is not None and i == win + k - 1:
            prof.__exit__(None, None, None)
            if args.trace:
                prof.export_chrome_trace(args.trace)
            if et is not None:
                et.stop()
                et.unregister_callback()
            prof = None
    if cuda:
        torch.cuda.synchronize()
        ms = [a.elapsed_time(b) for a, b in pairs]
    else:
        ms = pairs
    iter_ms = sum(ms) / len(ms) if ms else None
    print(f"llama_decoder: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, "
          f"final loss {losses[-1].item():.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "llama_decoder",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": ("mean of per-iteration CUDA event pairs" if cuda else "mean of per-iteration perf_counter spans")
                  + f", iterations 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
