"""Review-sentiment classifier trained from raw text through a torch DataLoader.

A map-style Dataset renders each review as text (seeded per index, so the corpus is fixed)
and tokenises it in Python: lower-casing, punctuation stripping, a word-piece-free vocabulary
lookup with hashed buckets for unknown words, truncation and padding to 128 tokens. Batches
come from a DataLoader with a seeded shuffling sampler and pinned memory, and a background
thread keeps a queue of ready batches for the training loop. The model is a 4-layer
pre-norm Transformer encoder (SDPA) with mean pooling; bf16 autocast, fused AdamW.
Timed with CUDA events.
"""
import argparse, json, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- run harness
def make_parser(doc, fixes=()):
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--fixed", action="store_true", help="use the corrected variant")
    if fixes:
        p.add_argument("--fix", action="append", default=[], choices=list(fixes),
                       help="apply one correction only (repeatable): " + ", ".join(fixes))
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--trace", help="chrome trace of iterations 10..10+K-1")
    p.add_argument("--trace-iters", type=int, default=5)
    p.add_argument("--et", help="execution trace of the same iterations")
    return p


def applied_fixes(args, fixes=(), control=False):
    if control:
        return []
    if not fixes:
        return ["all"] if args.fixed else []
    return sorted(set(fixes) if args.fixed else set(args.fix))


class Loop:
    """Iteration bookkeeping: timed range, profiled window, final report line."""

    def __init__(self, args, device, timer="events"):
        self.args, self.n = args, args.iters
        self.cuda = device.type == "cuda"
        self.timer = timer if self.cuda else "wall"
        k = args.trace_iters
        self.rec = bool(args.trace or args.et)
        self.w0 = max(0, min(10, self.n - k)) if self.rec else self.n
        self.w1 = min(self.n, self.w0 + k)
        self.t0, self.t1 = 5, (self.w0 if self.rec else self.n)
        if self.t1 <= self.t0:
            self.t0, self.t1 = min(5, self.n - 1), self.n
        self.marks, self.prof, self.eto = {}, None, None

    def _mark(self, key):
        if self.timer == "events":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks[key] = e
        else:
            if self.cuda:
                torch.cuda.synchronize()
            self.marks[key] = time.perf_counter()

    def begin(self, i):
        if i == self.t0:
            self._mark("start")
        if i == self.t1:
            self._mark("end")
        if self.rec and i == self.w0:
            if self.args.et:
                from torch.profiler import ExecutionTraceObserver
                self.eto = ExecutionTraceObserver()
                self.eto.register_callback(self.args.et)
                self.eto.start()
            if self.args.trace:
                acts = [torch.profiler.ProfilerActivity.CPU]
                if self.cuda:
                    acts.append(torch.profiler.ProfilerActivity.CUDA)
                self.prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
                self.prof.__enter__()

    def end(self, i):
        if self.rec and i == self.w1 - 1:
            if self.prof is not None:
                self.prof.__exit__(None, None, None)
                self.prof.export_chrome_trace(self.args.trace)
            if self.eto is not None:
                self.eto.stop()
                self.eto.unregister_callback()

    def report(self, program, fixes, timing="start/end marks"):
        if "end" not in self.marks:
            self._mark("end")
        a, b = self.marks["start"], self.marks["end"]
        if self.timer == "events":
            torch.cuda.synchronize()
            ms = a.elapsed_time(b)
        else:
            ms = (b - a) * 1e3
        res = dict(program=program, fixes=fixes, iters=self.n,
                   iter_ms=round(ms / (self.t1 - self.t0), 4),
                   timing="%s (%s) over iterations %d..%d" % (
                       timing, "CUDA events" if self.timer == "events" else "perf_counter"
                       + (" + cuda.synchronize" if self.cuda else ""), self.t0, self.t1 - 1))
        sys.stdout.flush()
        print("HOLDOUT_RESULT " + json.dumps(res), file=sys.stderr, flush=True)

import queue
import random
import threading
import zlib

import numpy as np
from torch.utils.data import DataLoader, Dataset

WORDS = ("the a movie film plot actor actress great terrible boring wonderful awful scene story "
         "director music camera dialogue ending character performance brilliant weak strong slow "
         "fast funny sad love hate watch again never always best worst script visual effects "
         "cast role screen minutes hour time really quite very not but and or so because").split()
POS, NEG = {"great", "wonderful", "brilliant", "best", "love", "funny", "strong"}, \
    {"terrible", "boring", "awful", "weak", "worst", "hate", "slow"}


class ReviewDataset(Dataset):
    def __init__(self, n, seq_len, vocab, seed=0):
        self.n, self.seq_len, self.vocab, self.seed = n, seq_len, vocab, seed
        self.table = {w: i + 2 for i, w in enumerate(WORDS)}

    def __len__(self):
        return self.n

    def render(self, idx):
        rng = random.Random(self.seed * 1_000_003 + idx)
        words = []
        for _ in range(rng.randint(100, 180)):
            w = rng.choice(WORDS) if rng.random() < 0.8 else "w%d" % rng.randint(0, 50000)
            words.append(w.capitalize() + "," if rng.random() < 0.1 else w)
        return " ".join(words)

    def tokenize(self, text):
        ids = []
        for tok in text.lower().split():
            tok = "".join(ch for ch in tok if ch.isalnum())
            if not tok:
                continue
            i = self.table.get(tok)
            if i is None:
                i = 2 + len(self.table) + zlib.crc32(tok.encode()) % (self.vocab - 2 - len(self.table))
            ids.append(i)
        ids = ids[:self.seq_len]
        return ids + [0] * (self.seq_len - len(ids))

    def __getitem__(self, idx):
        text = self.render(idx)
        words = set(text.lower().replace(",", "").split())
        label = int(len(words & POS) >= len(words & NEG))
        return torch.tensor(self.tokenize(text), dtype=torch.int64), label


class BackgroundLoader:
    """Iterates a DataLoader in a daemon thread and hands batches over through a queue."""

    def __init__(self, loader, depth=4):
        self.loader, self.q = loader, queue.Queue(maxsize=depth)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while True:
            for batch in self.loader:
                self.q.put(batch)

    def __iter__(self):
        while True:
            yield self.q.get()


def endless(loader):
    while True:
        for batch in loader:
            yield batch


class Classifier(nn.Module):
    def __init__(self, vocab, d, depth, heads, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(seq_len, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        h = self.enc(self.tok(ids) + self.pos)
        keep = (ids != 0).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, S, D, DEPTH, HEADS, VOCAB = (256, 128, 768, 4, 12, 32768) if cuda else (16, 128, 64, 1, 4, 4096)
    torch.manual_seed(0)
    ds = ReviewDataset(B * (args.iters + 8), S, VOCAB)
    sampler_gen = torch.Generator().manual_seed(3)
    if args.fixed:
        loader = DataLoader(ds, batch_size=B, shuffle=True, generator=sampler_gen, drop_last=True,
                            num_workers=8 if cuda else 2, pin_memory=cuda, persistent_workers=True,
                            prefetch_factor=4)
        batches = endless(loader)
    else:
        loader = DataLoader(ds, batch_size=B, shuffle=True, generator=sampler_gen, drop_last=True,
                            num_workers=0, pin_memory=cuda)
        batches = iter(BackgroundLoader(loader))
    model = Classifier(VOCAB, D, DEPTH, HEADS, S).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, **({"fused": True} if cuda else {}))
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        ids, y = next(batches)
        ids, y = ids.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(ids), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        loop.end(i)
    loop.report("loader_thread", applied_fixes(args), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
