"""GPT-style language-model pretraining over a sharded token corpus.

The corpus is a list of token shards (uint16 arrays, as memory-mapped from
.bin files); the trainer walks the shards in order, shuffling sequences within
each shard, and feeds (input, target) windows through a torch DataLoader with
worker processes. Model: pre-LN decoder, bf16 autocast, fused AdamW.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler


class ShardDataset(Dataset):
    def __init__(self, shards, seq_len):
        self.shards = shards if isinstance(shards, list) else [shards]
        self.seq_len = seq_len
        self.per_shard = [len(s) // (seq_len + 1) for s in self.shards]
        self.starts = np.cumsum([0] + self.per_shard)

    def __len__(self):
        return int(self.starts[-1])

    def __getitem__(self, i):
        s = int(np.searchsorted(self.starts, i, side="right") - 1)
        j = i - self.starts[s]
        chunk = self.shards[s][j * (self.seq_len + 1):(j + 1) * (self.seq_len + 1)].astype(np.int64)
        chunk = torch.from_numpy(chunk)
        return chunk[:-1], chunk[1:]


class ShardOrderSampler(Sampler):
    """Visits shards in order, shuffling sequences inside each shard."""

    def __init__(self, ds, seed=0):
        self.ds, self.g = ds, torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.ds)

    def __iter__(self):
        for s, n in enumerate(self.ds.per_shard):
            yield from (int(self.ds.starts[s]) + torch.randperm(n, generator=self.g)).tolist()


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(ctx, d) * 0.01)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        return self.head(self.ln(self.blocks(x)))


def main():
    ap = argparse.ArgumentParser(description="sharded LM pretraining")
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
        vocab, ctx, d, layers, heads, batch, workers = 32768, 1024, 768, 6, 12, 16, 6
    else:
        vocab, ctx, d, layers, heads, batch, workers = 512, 64, 32, 2, 2, 4, 2
        torch.set_num_threads(1)
    batches_per_shard, n_shards = 5, 8
    rng = np.random.default_rng(0)
    shards = [rng.integers(0, vocab, batches_per_shard * batch * (ctx + 1), dtype=np.uint16)
              for _ in range(n_shards)]

    model = LM(vocab, ctx, d, layers, heads).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=cuda)
    loader_kw = dict(batch_size=batch, num_workers=workers, pin_memory=cuda, drop_last=True)

    def batches():
        if args.fixed:
            ds = ShardDataset(shards, ctx)
            loader = DataLoader(ds, sampler=ShardOrderSampler(ds), persistent_workers=True, **loader_kw)
            while True:
                yield from loader
        else:
            shard_id = 0
            while True:
                loader = DataLoader(ShardDataset(shards[shard_id], ctx), shuffle=True, **loader_kw)
                yield from loader
                shard_id = (shard_id + 1) % n_shards

    def train_step(x, y):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    stream = batches()
    losses = []
    t0 = t1 = None
    et = prof = None
    for it in range(args.iters):
        if it == 5 and win > 5:
            sync()
            t0 = time.perf_counter()
        if it == win and profiling:
            sync()
            t1 = time.perf_counter() if t0 is not None else None
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
            prof.__enter__()
        x, y = next(stream)
        losses.append(train_step(x, y))
        if prof is not None and it == win + k - 1:
            prof.__exit__(None, None, None)
            if args.trace:
                prof.export_chrome_trace(args.trace)
            if et is not None:
                et.stop()
                et.unregister_callback()
            prof = None
    sync()
    if t0 is not None and t1 is None:
        t1 = time.perf_counter()
    stream.close()
    del stream
    iter_ms = (t1 - t0) * 1e3 / (win - 5) if t0 is not None else None
    print(f"sharded_lm: final loss {losses[-1].item():.4f} (ln V = {math.log(vocab):.2f})")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "sharded_lm",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": f"perf_counter with cuda.synchronize at both ends of iterations 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
