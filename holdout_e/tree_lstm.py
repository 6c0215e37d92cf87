"""Binary Tree-LSTM sentiment classifier over synthetic balanced binary parse trees.

Leaves are word embeddings, internal nodes combine their two children with an N-ary
Tree-LSTM cell (Tai et al., 2015), the root state is classified into 5 classes.
Adagrad, cross-entropy, one batch of trees per iteration, CUDA events.
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


class TreeLSTM(nn.Module):
    def __init__(self, vocab, dim, depth, classes=5):
        super().__init__()
        self.depth, self.dim = depth, dim
        self.emb = nn.Embedding(vocab, dim)
        self.leaf_w = nn.Linear(dim, 2 * dim)
        self.node_w = nn.Linear(2 * dim, 5 * dim)
        self.out = nn.Linear(dim, classes)

    def leaf(self, x):
        c, o = self.leaf_w(x).chunk(2, -1)
        return torch.sigmoid(o) * torch.tanh(c), c

    def cell(self, hl, cl, hr, cr):
        i, fl, fr, o, u = self.node_w(torch.cat([hl, hr], -1)).chunk(5, -1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    def encode(self, toks, t, level, pos):
        if level == self.depth:
            return self.leaf(self.emb(toks[t, pos:pos + 1]))
        hl, cl = self.encode(toks, t, level + 1, 2 * pos)
        hr, cr = self.encode(toks, t, level + 1, 2 * pos + 1)
        return self.cell(hl, cl, hr, cr)

    def forward(self, toks, by_level=False):
        T = toks.shape[0]
        if not by_level:
            root = torch.cat([self.encode(toks, t, 0, 0)[0] for t in range(T)])
        else:
            h, c = self.leaf(self.emb(toks))
            for _ in range(self.depth):
                h2, c2 = h.view(T, -1, 2, self.dim), c.view(T, -1, 2, self.dim)
                h, c = self.cell(h2[:, :, 0], c2[:, :, 0], h2[:, :, 1], c2[:, :, 1])
            root = h[:, 0]
        return self.out(root)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    T, depth, dim, V = (16, 5, 512, 20000) if cuda else (3, 3, 16, 100)
    torch.manual_seed(0)
    model = TreeLSTM(V, dim, depth).to(dev)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    loop = Loop(args, dev)
    tot = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        toks = torch.randint(0, V, (T, 2 ** depth), device=dev)
        y = toks[:, 0] % 5
        loss = F.cross_entropy(model(toks, by_level=args.fixed), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tot += loss.detach()
        loop.end(i)
    loop.report("tree_lstm", applied_fixes(args), "one Adagrad step per batch of trees")
    print("mean loss %.4f" % (tot.item() / args.iters))


if __name__ == "__main__":
    main()
