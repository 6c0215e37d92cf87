"""Token-classification (NER) fine-tuning of a BERT-base-sized encoder with a Trainer-style config.

Sentences of 24-160 word pieces (synthetic) are tokenised with padding to the model's
max_length of 512 and a key padding mask; a 12 x 768 pre-norm Transformer encoder
(SDPA attention) with a 9-tag head is trained with cross-entropy over the real tokens,
bf16 autocast, fused AdamW and linear warm-up; the config turns on gradient checkpointing
of the encoder layers. Timed with CUDA events.
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


from dataclasses import dataclass
import numpy as np
from torch.utils.checkpoint import checkpoint


@dataclass
class TrainConfig:
    max_length: int = 512
    pad_to_max_length: bool = True
    gradient_checkpointing: bool = True
    lr: float = 5e-5
    warmup_steps: int = 10


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ff1, self.ff2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x, bias):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.out(a.transpose(1, 2).reshape(b, n, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class TokenTagger(nn.Module):
    def __init__(self, vocab, dim, depth, heads, tags, max_len, checkpointing):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, tags)
        self.checkpointing = checkpointing

    def forward(self, ids, attention_mask):
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        bias = attention_mask[:, None, None, :]
        for layer in self.layers:
            if self.checkpointing and self.training:
                x = checkpoint(layer, x, bias, use_reentrant=False)
            else:
                x = layer(x, bias)
        return self.head(self.norm(x))


def tokenize_batch(sents, cfg, multiple=64):
    longest = max(len(tokens) for tokens, _ in sents)
    width = cfg.max_length if cfg.pad_to_max_length else min(cfg.max_length, -(-longest // multiple) * multiple)
    ids = np.zeros((len(sents), width), dtype=np.int64)
    labels = np.full((len(sents), width), -100, dtype=np.int64)
    for j, (tokens, tags) in enumerate(sents):
        ids[j, :len(tokens)] = tokens
        labels[j, :len(tokens)] = tags
    ids = torch.from_numpy(ids)
    return ids, torch.from_numpy(labels), ids != 0


def main():
    args = make_parser(__doc__, fixes=("pad", "ckpt")).parse_args()
    fixes = applied_fixes(args, ("pad", "ckpt"))
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, DIM, DEPTH, HEADS, MAXLEN = (64, 768, 12, 12, 512) if cuda else (4, 64, 2, 2, 128)
    VOCAB, TAGS = 30522, 9
    cfg = TrainConfig(max_length=MAXLEN, pad_to_max_length="pad" not in fixes,
                      gradient_checkpointing="ckpt" not in fixes)
    rng = np.random.default_rng(0)
    corpus = []
    for _ in range(2048):
        n = int(rng.integers(24, min(161, MAXLEN)))
        corpus.append((rng.integers(1, VOCAB, n), rng.integers(0, TAGS, n)))
    torch.manual_seed(0)
    model = TokenTagger(VOCAB, DIM, DEPTH, HEADS, TAGS, MAXLEN, cfg.gradient_checkpointing).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, **({"fused": True} if cuda else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup_steps))
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    model.train()
    for i in range(args.iters):
        loop.begin(i)
        batch = [corpus[j] for j in rng.integers(0, len(corpus), B)]
        ids, labels, mask = tokenize_batch(batch, cfg)
        ids, labels, mask = ids.to(dev), labels.to(dev), mask.to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits = model(ids, mask)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        total += loss.detach()
        loop.end(i)
    loop.report("ner_finetune", fixes, "one fine-tuning step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
