"""Sparse mixture-of-experts language model pre-training (Mixtral-style).

A decoder-only transformer whose feed-forward layers are top-2 routed mixtures of SwiGLU
experts (softmax router, renormalised top-2 weights), RMSNorm, causal SDPA attention and a
tied embedding. Trained on synthetic token streams made on the GPU with bf16 autocast and
fused AdamW; the router's load-balancing loss is added to the LM loss. Timed with CUDA events.
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

import math


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, S, D))


class Expert(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def route(gate_logits, top_k):
    """Softmax router: top-k experts per token, weights renormalised over the chosen k."""
    probs = gate_logits.float().softmax(-1)
    weights, chosen = probs.topk(top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    return probs, weights, chosen


def load_balancing_loss(probs, chosen, n_experts):
    frac = F.one_hot(chosen, n_experts).float().mean(dim=(0, 1))
    return n_experts * (frac * probs.mean(0)).sum()


def dispatch_masked(x, weights, chosen, experts):
    """Run every expert on the tokens routed to it (expert mask, one expert at a time)."""
    out = torch.zeros_like(x)
    mask = F.one_hot(chosen, len(experts)).permute(2, 1, 0)  # (E, k, T)
    for e, expert in enumerate(experts):
        slot, tok = torch.where(mask[e])
        if tok.numel() == 0:
            continue
        h = expert(x[tok]) * weights[tok, slot, None]
        out.index_add_(0, tok, h.to(out.dtype))
    return out


def dispatch_sorted(x, weights, chosen, experts):
    """Same routing: tokens sorted by expert id once, contiguous per-expert slices."""
    k = chosen.shape[1]
    flat = chosen.flatten()
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=len(experts)).tolist()
    tok = order // k
    w = weights.flatten()[order]
    xs = x[tok]
    outs, start = [], 0
    for e, n in enumerate(counts):
        if n:
            outs.append(experts[e](xs[start:start + n]))
        start += n
    h = torch.cat(outs) * w[:, None]
    return torch.zeros_like(x).index_add_(0, tok, h.to(x.dtype))


class MoEFeedForward(nn.Module):
    dispatch = staticmethod(dispatch_masked)

    def __init__(self, d, hidden, n_experts, top_k):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d, hidden) for _ in range(n_experts))

    def forward(self, x):
        B, S, D = x.shape
        flat = x.reshape(B * S, D)
        probs, weights, chosen = route(self.gate(flat), self.top_k)
        out = self.dispatch(flat, weights, chosen, self.experts)
        return out.view(B, S, D), load_balancing_loss(probs, chosen, len(self.experts))


class Block(nn.Module):
    def __init__(self, d, heads, hidden, n_experts, top_k):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads)
        self.moe = MoEFeedForward(d, hidden, n_experts, top_k)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        y, aux = self.moe(self.norm2(x))
        return x + y, aux


class MoELM(nn.Module):
    def __init__(self, vocab, d, depth, heads, hidden, n_experts, top_k):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, hidden, n_experts, top_k) for _ in range(depth))
        self.norm = RMSNorm(d)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids):
        x = self.embed(ids)
        aux = x.new_zeros(())
        for blk in self.blocks:
            x, a = blk(x)
            aux = aux + a
        return F.linear(self.norm(x), self.embed.weight), aux / len(self.blocks)


def make_batch(B, S, vocab, dev):
    ids = torch.randint(0, vocab, (B, S + 1), device=dev)
    return ids[:, :-1], ids[:, 1:]


def train_step(model, opt, ids, targets, cuda, aux_coef=0.01):
    with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
        logits, aux = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
    opt.zero_grad(set_to_none=True)
    (loss + aux_coef * aux).backward()
    opt.step()
    return loss.detach()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, S, D, DEPTH, HEADS, HID, E, VOCAB = 8, 1024, 768, 4, 12, 2048, 16, 16384
    else:
        B, S, D, DEPTH, HEADS, HID, E, VOCAB = 2, 32, 64, 2, 4, 128, 4, 512
    torch.manual_seed(0)
    if args.fixed:
        MoEFeedForward.dispatch = staticmethod(dispatch_sorted)
    model = MoELM(VOCAB, D, DEPTH, HEADS, HID, E, 2).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                            **({"fused": True} if cuda else {}))
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        ids, targets = make_batch(B, S, VOCAB, dev)
        total += train_step(model, opt, ids, targets, cuda)
        loop.end(i)
    loop.report("moe_router_lm", applied_fixes(args), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
