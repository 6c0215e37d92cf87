"""Batched greedy decoding with a KV cache (decode-throughput benchmark).

A 12-layer decoder-only model in bf16 decodes one token per iteration for a
batch of 64 sequences whose 1024-token prompts were already prefilled (the
prefilled cache is random data here). One iteration = one decode step.

    python kv_decode.py            # cache grown with torch.cat every step
    python kv_decode.py --fixed    # cache preallocated once, written in place
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile


class LayerCache:
    """Per-layer key/value cache, shape [batch, heads, length, head_dim]."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, capacity: int | None):
        if capacity is None:  # grows by concatenation
            self.k, self.v = k, v
            self.static = False
        else:  # preallocated for the whole generation
            b, h, t, d = k.shape
            self.k = torch.empty(b, h, capacity, d, dtype=k.dtype, device=k.device)
            self.v = torch.empty_like(self.k)
            self.k[:, :, :t].copy_(k)
            self.v[:, :, :t].copy_(v)
            self.static = True
        self.length = k.shape[2]

    def append(self, k_new: torch.Tensor, v_new: torch.Tensor):
        if self.static:
            t = self.length
            self.k[:, :, t:t + 1].copy_(k_new)
            self.v[:, :, t:t + 1].copy_(v_new)
            self.length += 1
            return self.k[:, :, :self.length], self.v[:, :, :self.length]
        self.k = torch.cat([self.k, k_new], dim=2)
        self.v = torch.cat([self.v, v_new], dim=2)
        self.length += 1
        return self.k, self.v


class DecoderLayer(nn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.scale = (d // n_head) ** -0.5
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor, cache: LayerCache) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        keys, values = cache.append(k, v)
        # single-query attention over the whole cache
        scores = torch.matmul(q, keys.transpose(-2, -1)) * self.scale
        probs = torch.softmax(scores.float(), dim=-1).to(values.dtype)
        y = torch.matmul(probs, values)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d: int, n_head: int, n_layer: int, max_pos: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.layers = nn.ModuleList([DecoderLayer(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def step(self, token: torch.Tensor, position: int, caches: list[LayerCache]) -> torch.Tensor:
        x = self.emb(token)[:, None, :] + self.pos.weight[position]
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache)
        logits = self.head(self.ln_f(x[:, -1]))
        return logits.argmax(dim=-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="preallocate the KV cache and write it in place")
    ap.add_argument("--iters", type=int, default=40, help="decode steps")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        vocab, d, n_head, n_layer, batch, prompt = 32000, 1024, 16, 12, 64, 1024
        dtype = torch.bfloat16
    else:
        vocab, d, n_head, n_layer, batch, prompt = 512, 64, 4, 2, 4, 64
        dtype = torch.float32
    torch.manual_seed(0)
    max_len = prompt + args.iters + 1
    model = Decoder(vocab, d, n_head, n_layer, max_pos=max_len).to(device=device, dtype=dtype).eval()

    hd = d // n_head
    caches = []
    for _ in range(n_layer):
        k = torch.randn(batch, n_head, prompt, hd, device=device, dtype=dtype)
        v = torch.randn(batch, n_head, prompt, hd, device=device, dtype=dtype)
        caches.append(LayerCache(k, v, capacity=max_len if args.fixed else None))
        del k, v
    token = torch.randint(0, vocab, (batch,), device=device)
    generated = torch.empty(batch, args.iters, dtype=torch.long, device=device)

    k_tr = min(args.trace_iters, args.iters)
    tracing = bool(args.trace or args.et)
    p0 = (10 if args.iters >= 10 + k_tr else max(0, args.iters - k_tr)) if tracing else None

    if cuda:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters + 1)]
    host_t = [0.0] * (args.iters + 1)

    def decode(i: int):
        nonlocal token
        if cuda:
            marks[i].record()
        host_t[i] = time.perf_counter()
        token = model.step(token, prompt + i, caches)
        generated[:, i] = token

    prof = None
    et = None
    with torch.inference_mode():
        i = 0
        while i < args.iters:
            if i == p0:
                if args.et:
                    et = ExecutionTraceObserver()
                    et.register_callback(args.et)
                    et.start()
                acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
                with profile(activities=acts, record_shapes=True, with_stack=True) as prof:
                    for j in range(p0, p0 + k_tr):
                        decode(j)
                if et is not None:
                    et.stop()
                    et.unregister_callback()
                if args.trace:
                    prof.export_chrome_trace(args.trace)
                i = p0 + k_tr
                continue
            decode(i)
            i += 1
        if cuda:
            marks[args.iters].record()
            torch.cuda.synchronize()
        host_t[args.iters] = time.perf_counter()

    if cuda:
        per = [marks[j].elapsed_time(marks[j + 1]) for j in range(args.iters)]
    else:
        per = [(host_t[j + 1] - host_t[j]) * 1e3 for j in range(args.iters)]
    skip = set(range(p0, p0 + k_tr)) if p0 is not None else set()
    steady = [t for j, t in enumerate(per) if j >= 5 and (p0 is None or j < p0)] or \
        [t for j, t in enumerate(per) if j not in skip] or per
    iter_ms = statistics.median(steady)
    mem = torch.cuda.max_memory_reserved() / 2**30 if cuda else 0.0
    print(f"decode: batch {batch}, context {prompt}->{prompt + args.iters}, {iter_ms:.3f} ms/token (median), "
          f"{batch / iter_ms * 1e3:.0f} tok/s, peak reserved {mem:.1f} GiB, sample {generated[0, :8].tolist()}")
    print("HOLDOUT_RESULT " + json.dumps({"program": "kv_decode", "fixes": ["all"] if args.fixed else [],
                                          "iters": args.iters, "iter_ms": iter_ms,
                                          "timing": "CUDA events at each decode-step boundary, median"}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
