"""Conformer-CTC acoustic model training on synthetic log-mel features.

Conv2d subsampling (4x), 12 Conformer blocks (macaron half-step FFNs, multi-head
self-attention with a key-padding mask, convolution module with GLU, depthwise conv,
BatchNorm, SiLU), CTC loss over a 256-token vocabulary. bf16 autocast, fused AdamW,
gradient clipping. Utterances have random lengths; features are device-resident.
"""
import argparse, json, math, sys, time
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



class FFN(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Dropout(0.1), nn.Linear(4 * d, d))

    def forward(self, x):
        return self.net(x)


class MHSA(nn.Module):
    def __init__(self, d, h, low_precision_scores):
        super().__init__()
        self.h, self.lp = h, low_precision_scores
        self.norm, self.qkv, self.out = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, pad):
        B, T, D = x.shape
        q, k, v = self.qkv(self.norm(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        scale = 1.0 / math.sqrt(D // self.h)
        bias = torch.zeros(B, 1, 1, T, device=x.device).masked_fill(pad[:, None, None, :], float("-inf"))
        if self.lp:
            scores = (q @ k.transpose(-1, -2)) * scale
            attn = (scores.float() + bias).softmax(-1).to(v.dtype)
            a = attn @ v
        else:
            with torch.autocast(x.device.type, enabled=False):
                scores = (q.float() @ k.float().transpose(-1, -2)) * scale
                attn = (scores + bias).softmax(-1)
                a = attn @ v.float()
        return self.out(a.transpose(1, 2).reshape(B, T, D))


class ConvModule(nn.Module):
    def __init__(self, d, k=31):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1, self.pw2 = nn.Conv1d(d, 2 * d, 1), nn.Conv1d(d, d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x):
        y = F.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
        return self.pw2(F.silu(self.bn(self.dw(y)))).transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, d, h, lp):
        super().__init__()
        self.ff1, self.ff2 = FFN(d), FFN(d)
        self.att, self.conv = MHSA(d, h, lp), ConvModule(d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, pad):
        x = x + 0.5 * self.ff1(x)
        x = x + self.att(x, pad)
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    def __init__(self, mels, d, h, n, vocab, lp):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, d, 3, 2, 1), nn.ReLU(), nn.Conv2d(d, d, 3, 2, 1), nn.ReLU())
        self.proj = nn.Linear(d * ((mels + 3) // 4), d)
        self.blocks = nn.ModuleList(ConformerBlock(d, h, lp) for _ in range(n))
        self.head = nn.Linear(d, vocab)

    def forward(self, feats, lens):
        x = self.sub(feats[:, None])  # (B, d, T/4, mels/4)
        B, D, T, M = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(B, T, D * M))
        out_lens = (lens + 3) // 4
        pad = torch.arange(T, device=x.device)[None] >= out_lens[:, None]
        for b in self.blocks:
            x = b(x, pad)
        return self.head(x), out_lens


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, frames, mels, d, h, n, vocab, tgt = 32, 2048, 80, 512, 8, 12, 256, 120
    else:
        B, frames, mels, d, h, n, vocab, tgt = 2, 64, 16, 32, 4, 2, 16, 6
    torch.manual_seed(0)
    model = Conformer(mels, d, h, n, vocab, args.fixed).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-3, fused=cuda)
    pool = [(torch.randn(B, frames, mels, device=dev),
             torch.randint(frames * 3 // 4, frames + 1, (B,), device=dev),
             torch.randint(1, vocab, (B, tgt), device=dev),
             torch.randint(tgt // 2, tgt + 1, (B,), device=dev)) for _ in range(3)]
    loop = Loop(args, dev, timer="events")
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        feats, lens, targets, tlens = pool[i % 3]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits, out_lens = model(feats, lens)
        logp = logits.float().log_softmax(-1).transpose(0, 1)
        loss = F.ctc_loss(logp, targets, out_lens, tlens, zero_infinity=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(loss.detach())
        loop.end(i)
    loop.report("conformer_ctc", applied_fixes(args), "CUDA events before step 5 and before the end of the timed range")
    print("mean loss %.4f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
