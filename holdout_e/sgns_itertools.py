"""Skip-gram with negative sampling (word2vec) on a synthetic Zipfian corpus.

Centre/context pairs are drawn from a device-resident token stream, 8 negatives per pair
from the unigram^0.75 noise distribution; input and output embedding tables trained with
fused Adam. The loop is a `while True` over itertools.count() with a break. CUDA events.
"""
import argparse, itertools, json, sys, time
import numpy as np
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


class NegativeSampler:
    def __init__(self, counts, dev, on_device):
        p = counts ** 0.75
        self.p = p / p.sum()
        self.V, self.dev, self.on_device = len(counts), dev, on_device
        self.rng = np.random.default_rng(0)
        self.p_t = torch.as_tensor(self.p, dtype=torch.float32, device=dev)

    def sample(self, shape):
        if self.on_device:
            n = int(np.prod(shape))
            return torch.multinomial(self.p_t, n, replacement=True).view(shape)
        neg = self.rng.choice(self.V, size=shape, p=self.p)
        return torch.from_numpy(neg).to(self.dev)


class SGNS(nn.Module):
    def __init__(self, V, d):
        super().__init__()
        self.inp = nn.Embedding(V, d)
        self.out = nn.Embedding(V, d)
        nn.init.uniform_(self.inp.weight, -0.5 / d, 0.5 / d)
        nn.init.zeros_(self.out.weight)

    def forward(self, c, ctx, neg):
        u = self.inp(c)                                   # (B, d)
        pos = (u * self.out(ctx)).sum(-1)
        negs = torch.bmm(self.out(neg), u.unsqueeze(-1)).squeeze(-1)
        return -(F.logsigmoid(pos).mean() + F.logsigmoid(-negs).sum(-1).mean())


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    V, d, B, K, N = (1_000_000, 128, 32768, 8, 20_000_000) if cuda else (2000, 16, 64, 4, 20000)
    rng = np.random.default_rng(1)
    counts = 1.0 / np.arange(1, V + 1) ** 1.07
    corpus = torch.from_numpy(rng.choice(V, size=N, p=counts / counts.sum())).to(dev)
    sampler = NegativeSampler(counts, dev, on_device=args.fixed)
    model = SGNS(V, d).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda)
    loop = Loop(args, dev)
    offsets = itertools.cycle([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5])
    tot = torch.zeros((), device=dev)
    for i in itertools.count():
        if i == args.iters:
            break
        loop.begin(i)
        pos = torch.randint(5, N - 5, (B,), device=dev)
        c, ctx = corpus[pos], corpus[pos + next(offsets)]
        neg = sampler.sample((B, K))
        loss = model(c, ctx, neg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tot += loss.detach()
        loop.end(i)
    loop.report("sgns_itertools", applied_fixes(args), "one Adam step per batch of pairs")
    print("mean loss %.4f" % (tot.item() / args.iters))


if __name__ == "__main__":
    main()
