"""Lloyd k-means over 8M 64-dimensional patch embeddings (16 clusters), plain tensor code.

Each iteration is one Lloyd step: squared distances to the centroids as one addmm, argmin
assignment, then the centroid update from per-cluster sums and counts (empty clusters keep
their old centroid). No autograd, no nn.Module; the inertia is accumulated on the device and
printed once at the end. Timed with CUDA events.
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


K = 16


def assign(x, centroids):
    # ||x||^2 is constant per row, so the argmin only needs ||c||^2 - 2 x.c
    c2 = (centroids * centroids).sum(1)
    d = torch.addmm(c2[None, :], x, centroids.t(), beta=1.0, alpha=-2.0)
    dmin, labels = d.min(1)
    return labels, dmin


def cluster_sums(x, labels, k):
    sums = torch.zeros(k, x.shape[1], device=x.device, dtype=x.dtype)
    sums.index_add_(0, labels, x)
    counts = torch.zeros(k, device=x.device, dtype=x.dtype)
    counts.index_add_(0, labels, torch.ones_like(labels, dtype=x.dtype))
    return sums, counts


def cluster_sums_gemm(x, labels, k, groups):
    n, dim = x.shape
    onehot = F.one_hot(labels, k).to(x.dtype).view(groups, n // groups, k)
    sums = torch.bmm(onehot.transpose(1, 2), x.view(groups, n // groups, dim)).sum(0)
    counts = onehot.sum((0, 1))
    return sums, counts


def lloyd_step(x, x2, centroids, fixed, groups):
    labels, dmin = assign(x, centroids)
    if fixed:
        sums, counts = cluster_sums_gemm(x, labels, K, groups)
    else:
        sums, counts = cluster_sums(x, labels, K)
    new = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centroids)
    inertia = (dmin + x2).sum()
    return new, inertia


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    N, D, groups = (8 * 1024 * 1024, 64, 512) if cuda else (32768, 16, 16)
    torch.manual_seed(0)
    true_centers = torch.randn(K, D, device=dev) * 4
    x = true_centers[torch.randint(0, K, (N,), device=dev)] + torch.randn(N, D, device=dev)
    x2 = (x * x).sum(1)
    centroids = x[torch.randperm(N, device=dev)[:K]].clone()
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        centroids, inertia = lloyd_step(x, x2, centroids, args.fixed, groups)
        total += inertia
        loop.end(i)
    loop.report("kmeans_tiles", applied_fixes(args), "one Lloyd step per iteration")
    print("final inertia/N %.4f  centroid checksum %.4f" % (inertia.item() / N, centroids.abs().sum().item()))


if __name__ == "__main__":
    main()
