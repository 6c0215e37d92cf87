"""LLaMA-style decoder pre-training with gradient accumulation.

Hand-written decoder (RMSNorm, rotary embeddings, multi-head attention through
F.scaled_dot_product_attention, SwiGLU MLP, untied head), bf16 autocast, fused AdamW.
Each optimizer step accumulates 4 micro-batches; the decoder blocks use activation
checkpointing. Micro-batches are packed on the host from a numpy token corpus:
documents are separated by an EOS id and the label of each document's first token is
ignored; the packed arrays are uploaded from pinned memory.
Each micro-batch loss is normalised by its number of label tokens.
"""
import argparse, json, math, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


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



FIXES = ("mask", "ckpt")
EOS = 0


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope(x, cos, sin):
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, causal_flag):
        super().__init__()
        self.h, self.kvh, self.hd = heads, kv_heads, d // heads
        self.causal_flag = causal_flag
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wkv = nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        hid = int(8 * d / 3) // 64 * 64
        self.w13 = nn.Linear(d, 2 * hid, bias=False)
        self.w2 = nn.Linear(hid, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, S, D = x.shape
        h = self.n1(x)
        q = self.wq(h).view(B, S, self.h, self.hd).transpose(1, 2)
        k, v = self.wkv(h).view(B, S, 2, self.kvh, self.hd).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.causal_flag:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))
        x = x + self.wo(a.transpose(1, 2).reshape(B, S, D))
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, vocab, d, layers, heads, kv_heads, seq, causal_flag, checkpointing):
        super().__init__()
        self.checkpointing = checkpointing
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, kv_heads, causal_flag) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, ids):
        S = ids.shape[1]
        mask = None
        if not self.blocks[0].causal_flag:
            mask = torch.full((S, S), float("-inf"), device=ids.device).triu_(1).expand(ids.shape[0], 1, S, S)
        x = self.emb(ids)
        for b in self.blocks:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(b, x, self.cos[:S], self.sin[:S], mask, use_reentrant=False)
            else:
                x = b(x, self.cos[:S], self.sin[:S], mask)
        return self.head(self.norm(x))


def pack_micro_batch(corpus, rng, rows, seq):
    starts = rng.integers(0, len(corpus) - seq - 1, size=rows)
    window = corpus[starts[:, None] + np.arange(seq + 1)]
    ids, labels = window[:, :-1].astype(np.int64), window[:, 1:].astype(np.int64)
    for r in range(rows):  # the token after an EOS starts a new document: no label for it
        bos = np.flatnonzero(ids[r] == EOS)
        labels[r, bos] = -100
    return ids, labels


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        V, D, L, H, KV, S, MB, ACC = 32000, 1024, 8, 16, 16, 4096, 2, 4
    else:
        V, D, L, H, KV, S, MB, ACC = 512, 64, 2, 4, 4, 64, 2, 2
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    corpus = rng.integers(1, V, size=(4_000_000 if cuda else 100_000), dtype=np.int32)
    corpus[rng.random(corpus.shape[0]) < 1 / 300] = EOS
    model = Llama(V, D, L, H, KV, S, "mask" in fixes, "ckpt" not in fixes).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=cuda)
    loop = Loop(args, dev, timer="events")
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        step_loss = torch.zeros((), device=dev)
        for m in range(ACC):
            ids, lab = pack_micro_batch(corpus, rng, MB, S)
            ids_t, lab_t = torch.from_numpy(ids), torch.from_numpy(lab)
            if cuda:
                ids_t, lab_t = ids_t.pin_memory(), lab_t.pin_memory()
            ids_t, lab_t = ids_t.to(dev, non_blocking=True), lab_t.to(dev, non_blocking=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                logits = model(ids_t)
            loss_sum = F.cross_entropy(logits.view(-1, V).float(), lab_t.view(-1), ignore_index=-100, reduction="sum")
            n_local = int((lab != -100).sum())
            loss = loss_sum / (n_local * ACC)
            loss.backward()
            step_loss += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss)
        loop.end(i)
    loop.report("llama_accum", fixes, "CUDA events before step 5 and before the end of the timed range")
    print("last loss %.4f" % losses[-1].item())


if __name__ == "__main__":
    main()
