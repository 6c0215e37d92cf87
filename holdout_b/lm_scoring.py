"""Zero-shot multiple-choice scoring with a GPT-style causal LM.

Each prompt ends right before the answer; the prediction is the answer
letter (" A" .. " D") whose token gets the highest next-token log-probability.
Batches of pre-tokenised, fixed-length prompts are scored under
torch.inference_mode with a bf16 model.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        for blk in self.blocks:
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, ids, logits_to_keep=0):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return self.lm_head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser(description="multiple-choice LM scoring")
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
        vocab, ctx, d, layers, heads, batch = 50304, 512, 1024, 8, 16, 64
    else:
        vocab, ctx, d, layers, heads, batch = 2048, 64, 64, 2, 4, 4

    model = GPT(vocab, ctx, d, layers, heads).to(dev).eval()
    if cuda:
        model = model.to(torch.bfloat16)
    answer_ids = torch.tensor([317, 347, 327, 360], device=dev) % vocab  # " A" " B" " C" " D"
    prompts = torch.randint(0, vocab, (8, batch, ctx), device=dev)
    keep = 1 if args.fixed else 0

    def score(ids):
        logits = model(ids, logits_to_keep=keep)
        choice = logits[:, -1, :].float().log_softmax(-1)[:, answer_ids]
        return choice.argmax(-1)

    profiling = bool(args.trace or args.et)
    k = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    preds, spans = [], []

    def run_batch(i):
        timed = 5 <= i < win
        if timed:
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
            else:
                t = time.perf_counter()
        preds.append(score(prompts[i % 8]))
        if timed:
            if cuda:
                e.record()
                spans.append((s, e))
            else:
                spans.append((time.perf_counter() - t) * 1e3)

    with torch.inference_mode():
        for i in range(win):
            run_batch(i)
        if profiling:
            et = None
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
                for i in range(win, win + k):
                    run_batch(i)
                    prof.step()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            if et is not None:
                et.stop()
                et.unregister_callback()
            for i in range(win + k, args.iters):
                run_batch(i)
        answers = torch.cat(preds).cpu()
    ms = [a.elapsed_time(b) for a, b in spans] if cuda else spans
    iter_ms = sum(ms) / len(ms) if ms else None
    counts = torch.bincount(answers, minlength=4).tolist()
    print(f"lm_scoring: {answers.numel()} prompts scored, answer histogram {counts}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "lm_scoring",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": ("mean of per-batch CUDA event pairs" if cuda else "mean of per-batch perf_counter spans")
                  + f", batches 5..{win - 1}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
