"""Transformer-base style encoder-decoder translation training (synthetic pairs).

nn.Transformer (pre-norm, batch_first) with shared source/target embeddings,
label-smoothed cross-entropy over a 32k joint BPE vocabulary, padding ignored
in the loss, gradient accumulation over micro-batches, bf16 autocast and
inverse-square-root warmup.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class Seq2Seq(nn.Module):
    def __init__(self, vocab, d, heads, enc, dec, ffn, max_len):
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab, d, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d)
        self.core = nn.Transformer(d, heads, enc, dec, ffn, dropout=0.1, batch_first=True, norm_first=True)
        self.out = nn.Linear(d, vocab, bias=False)
        self.out.weight = self.emb.weight
        nn.init.normal_(self.emb.weight, std=d ** -0.5)

    def embed(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.emb(ids) * math.sqrt(self.d) + self.pos(pos)

    def forward(self, src, tgt_in):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=src.device)
        h = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=mask, tgt_is_causal=True)
        return self.out(h)


def smoothed_nll(logits, target, eps):
    vocab = logits.size(-1)
    logp = F.log_softmax(logits.float(), dim=-1)
    soft = F.one_hot(target, vocab).float() * (1.0 - eps) + eps / vocab
    nll = -(soft * logp).sum(-1)
    keep = (target != PAD).float()
    return (nll * keep).sum() / keep.sum()


def smoothed_nll_builtin(logits, target, eps):
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=PAD, label_smoothing=eps)


def make_pairs(n, batch, length, vocab, dev):
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    src = torch.randint(4, vocab, (n, batch, length), device=dev, generator=g)
    tgt = torch.randint(4, vocab, (n, batch, length + 1), device=dev, generator=g)
    lens = torch.randint(length // 2, length + 1, (n, batch, 1), device=dev, generator=g)
    pos = torch.arange(length + 1, device=dev)
    src = src.masked_fill(pos[:length] >= lens, PAD)
    tgt = tgt.masked_fill(pos >= lens + 1, PAD)
    tgt[..., 0] = 1  # BOS
    return src, tgt


def main():
    ap = argparse.ArgumentParser(description="seq2seq translation training")
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
        vocab, d, heads, enc, dec, ffn, length, micro, accum = 32000, 512, 8, 4, 4, 2048, 256, 32, 2
    else:
        vocab, d, heads, enc, dec, ffn, length, micro, accum = 512, 32, 2, 1, 1, 64, 16, 4, 2
    eps, warmup = 0.1, 4000

    model = Seq2Seq(vocab, d, heads, enc, dec, ffn, length + 1).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, fused=cuda)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: d ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5))
    src_pool, tgt_pool = make_pairs(8, micro, length, vocab, dev)
    criterion = smoothed_nll_builtin if args.fixed else smoothed_nll

    def optimizer_step(i):
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=dev)
        for m in range(accum):
            j = (i * accum + m) % 8
            src, tgt = src_pool[j], tgt_pool[j]
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                logits = model(src, tgt[:, :-1])
            loss = criterion(logits, tgt[:, 1:], eps) / accum
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return total

    def sync():
        if cuda:
            torch.cuda.synchronize()

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    model.train()
    losses = []
    for i in range(min(5, win)):
        losses.append(optimizer_step(i))
    t0 = t1 = None
    if win > 5:
        sync()
        t0 = time.perf_counter()
        for i in range(5, win):
            losses.append(optimizer_step(i))
        sync()
        t1 = time.perf_counter()
    if profiling:
        et = None
        if args.et:
            et = torch.profiler.ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            for i in range(win, win + k):
                losses.append(optimizer_step(i))
        if args.trace:
            prof.export_chrome_trace(args.trace)
        if et is not None:
            et.stop()
            et.unregister_callback()
        for i in range(win + k, args.iters):
            losses.append(optimizer_step(i))
    sync()
    iter_ms = (t1 - t0) * 1e3 / (win - 5) if t0 is not None else None
    print(f"translation: {accum}x{micro} pairs per step, final loss {losses[-1].item():.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "translation",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": f"perf_counter with cuda.synchronize around optimizer steps 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
