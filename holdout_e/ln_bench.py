"""Benchmark a stack of whole-sample-normalised residual blocks on a batch of feature maps.

Each block normalises every sample over all of its (C, H, W) values with a learned
per-element affine (LayerNorm over [C, H, W]), applies a 1x1 channel projection and GELU,
and adds the result back. The benchmarked function runs the whole stack once on a
batch of 8 feature maps under no_grad. Timed with perf_counter and cuda.synchronize.
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


class Block(nn.Module):
    def __init__(self, c, h, w):
        super().__init__()
        self.norm = nn.LayerNorm([c, h, w])
        self.proj = nn.Conv2d(c, c, 1)
        nn.init.normal_(self.norm.weight, 1.0, 0.1)
        nn.init.normal_(self.norm.bias, 0.0, 0.1)


def sample_norm(x, norm):
    """LayerNorm over all of (C, H, W), written as a var_mean reduction and an elementwise affine."""
    flat = x.flatten(1)
    var, mean = torch.var_mean(flat, dim=1, correction=0, keepdim=True)
    xhat = (flat - mean) * torch.rsqrt(var + norm.eps)
    return torch.addcmul(norm.bias.flatten(), xhat, norm.weight.flatten()).view_as(x)


def features(x, blocks, wide):
    for blk in blocks:
        h = sample_norm(x, blk.norm) if wide else blk.norm(x)
        x = x + F.gelu(blk.proj(h))
    return x


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    N, C, H, W, depth = (8, 256, 128, 128, 8) if cuda else (8, 8, 16, 16, 3)
    torch.manual_seed(0)
    blocks = nn.ModuleList(Block(C, H, W) for _ in range(depth)).to(dev).eval()
    x = torch.randn(N, C, H, W, device=dev)
    loop = Loop(args, dev, timer="wall")
    acc = torch.zeros((), device=dev)
    with torch.no_grad():
        for i in range(args.iters):
            loop.begin(i)
            y = features(x, blocks, wide=args.fixed)
            acc += y.float().square().mean()
            loop.end(i)
    loop.report("ln_bench", applied_fixes(args), "one features() call per iteration")
    print("checksum %.6f" % (acc.item() / args.iters))


if __name__ == "__main__":
    main()
