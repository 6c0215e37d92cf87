"""Benchmark: batched conjugate-gradient solve of per-pixel 8x8 normal equations.

A dense motion-refinement step needs, for every pixel of a 2048 x 2048 frame, the solution of
(J^T J + lambda I) x = J^T r with an 8-parameter Jacobian per pixel. The systems are assembled
once (per-pixel arrays, pixel index last, as the assembly code produces them) and the
benchmarked function solves all of them with 16 conjugate-gradient iterations. No autograd,
fp32. Timed with perf_counter and torch.cuda.synchronize() around the measured calls.
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


CG_ITERS = 16


def assemble(m, n, pixels, dev, lam=1e-2):
    torch.manual_seed(0)
    A = torch.zeros(n, n, pixels, device=dev)
    b = torch.zeros(n, pixels, device=dev)
    for k in range(m):
        jk = torch.randn(n, pixels, device=dev)
        rk = torch.randn(pixels, device=dev)
        A += jk[:, None, :] * jk[None, :, :]
        b += jk * rk
    A += lam * torch.eye(n, device=dev)[:, :, None]
    return A, b


def matvec(A, p):
    # A: (n, n, P), p: (n, P) -> (n, P)
    return torch.matmul(A.permute(2, 0, 1), p.t().unsqueeze(-1)).squeeze(-1).t()


def cg_solve(A, b, iters=CG_ITERS):
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rr = (r * r).sum(0)
    for _ in range(iters):
        Ap = matvec(A, p)
        alpha = rr / (p * Ap).sum(0).clamp_min(1e-30)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = (r * r).sum(0)
        p = r + (rr_new / rr.clamp_min(1e-30)) * p
        rr = rr_new
    return x


def cg_solve_rows(A, b, iters=CG_ITERS):
    A = A.permute(2, 0, 1).contiguous()  # (P, n, n)
    r = b.t().contiguous()               # (P, n)
    x = torch.zeros_like(r)
    p = r.clone()
    rr = (r * r).sum(1)
    for _ in range(iters):
        Ap = torch.bmm(A, p.unsqueeze(-1)).squeeze(-1)
        alpha = rr / (p * Ap).sum(1).clamp_min(1e-30)
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * Ap
        rr_new = (r * r).sum(1)
        p = r + (rr_new / rr.clamp_min(1e-30))[:, None] * p
        rr = rr_new
    return x.t()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    M, N, P = (16, 8, 2048 * 2048) if cuda else (16, 8, 128 * 128)
    A, b = assemble(M, N, P, dev)
    solve = cg_solve_rows if args.fixed else cg_solve
    loop = Loop(args, dev, timer="wall")
    acc = torch.zeros((), device=dev)
    with torch.no_grad():
        for i in range(args.iters):
            loop.begin(i)
            x = solve(A, b)
            acc += x.abs().mean()
            loop.end(i)
    loop.report("pixel_cg_bench", applied_fixes(args), "one batched CG solve per call")
    res = (matvec(A, x) - b).abs().max().item()
    print("mean |x| %.6f  max residual %.3e" % (acc.item() / args.iters, res))


if __name__ == "__main__":
    main()
