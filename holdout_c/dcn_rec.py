"""DCN-v2 click-through-rate model: benchmark of one training step.

Deep & Cross Network v2 (full-rank cross layers in parallel with a deep MLP) over
13 dense and 26 categorical features (one concatenated embedding table with per-
feature row offsets). The benchmarked function is `train_step(batch)`; batches are
pre-generated on the device so only the step itself is measured.
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


class CrossLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x0, x):
        return x0 * self.lin(x) + x


class DCNv2(nn.Module):
    def __init__(self, n_dense, n_sparse, rows, emb, cross, deep):
        super().__init__()
        self.emb = nn.Embedding(n_sparse * rows, emb)
        self.register_buffer("offsets", torch.arange(n_sparse) * rows, persistent=False)
        d = n_dense + n_sparse * emb
        self.cross = nn.ModuleList(CrossLayer(d) for _ in range(cross))
        layers, k = [], d
        for w in deep:
            layers += [nn.Linear(k, w), nn.ReLU()]
            k = w
        self.deep = nn.Sequential(*layers)
        self.out = nn.Linear(d + k, 1)

    def forward(self, dense, sparse):
        e = self.emb(sparse + self.offsets).flatten(1)
        x0 = torch.cat([dense, e], dim=1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.out(torch.cat([x, self.deep(x0)], dim=1)).squeeze(1)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, rows, emb, cross, deep = 16384, 20000, 64, 3, (2048, 2048, 1024)
    else:
        B, rows, emb, cross, deep = 256, 500, 8, 2, (128, 64)
    torch.manual_seed(0)
    model = DCNv2(13, 26, rows, emb, cross, deep).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda)
    batches = [(torch.randn(B, 13, device=dev), torch.randint(0, rows, (B, 26), device=dev),
                (torch.rand(B, device=dev) < 0.25).float()) for _ in range(4)]
    use_amp = args.fixed and cuda

    def train_step(batch):
        dense, sparse, label = batch
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_amp):
            logit = model(dense, sparse)
        loss = F.binary_cross_entropy_with_logits(logit.float(), label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    loop = Loop(args, dev, timer="wall")
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        losses.append(train_step(batches[i % len(batches)]))
        loop.end(i)
    loop.report("dcn_rec", applied_fixes(args), "benchmark: wall clock around calls of train_step")
    print("mean loss %.4f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
