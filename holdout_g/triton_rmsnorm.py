"""Brute-force retrieval over a device-resident embedding bank with a Triton RMSNorm kernel.

The bank (chunks of 32k x 4096 bf16 document embeddings) is RMS-normalised with a learned
per-dimension gain by a hand-written Triton kernel, chunk by chunk, then scored against a batch
of 256 queries with one GEMM per chunk and reduced to the top 10 documents per query. Plain
functions over raw tensors: no nn.Module, no autograd, no optimizer. Without Triton (or on
CPU) the same normalisation runs as torch ops. Timed with CUDA events.
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

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

if triton is not None:
    @triton.jit
    def _rmsnorm_rows(X, W, Y, M, N, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
        pid = tl.program_id(0)
        cols = tl.arange(0, BLOCK_N)
        cmask = cols < N
        w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
        for r in range(ROWS):
            row = pid * ROWS + r
            m = cmask & (row < M)
            x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
            inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
            tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty), mask=m)

# launch configuration of the kernel (rows per program, warps per program)
ROWS_PER_PROGRAM, NUM_WARPS = 256, 1


def rmsnorm(x, w, eps=1e-6):
    M, N = x.shape
    if triton is None or not x.is_cuda:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    y = torch.empty_like(x)
    grid = (triton.cdiv(M, ROWS_PER_PROGRAM),)
    _rmsnorm_rows[grid](x, w, y, M, N, eps, ROWS=ROWS_PER_PROGRAM,
                        BLOCK_N=triton.next_power_of_2(N), num_warps=NUM_WARPS)
    return y


def search_chunk(queries, chunk, gain, k):
    docs = rmsnorm(chunk, gain)
    scores = queries @ docs.t()
    return scores.float().topk(k, dim=1)


def search(queries, bank, gain, k=10):
    best_s, best_i = None, None
    for c, chunk in enumerate(bank):
        s, idx = search_chunk(queries, chunk, gain, k)
        idx = idx + c * chunk.shape[0]
        if best_s is None:
            best_s, best_i = s, idx
        else:
            s, pos = torch.cat([best_s, s], 1).topk(k, dim=1)
            best_s, best_i = s, torch.cat([best_i, idx], 1).gather(1, pos)
    return best_s, best_i


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    global ROWS_PER_PROGRAM, NUM_WARPS
    if args.fixed:
        ROWS_PER_PROGRAM, NUM_WARPS = 1, 8
    CHUNKS, ROWS, DIM, Q = (12, 32768, 4096, 256) if cuda else (3, 512, 256, 16)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    bank = [torch.randn(ROWS, DIM, device=dev, dtype=dtype) for _ in range(CHUNKS)]
    gain = 1.0 + 0.1 * torch.randn(DIM, device=dev)
    loop = Loop(args, dev)
    acc = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        queries = torch.randn(Q, DIM, device=dev, dtype=dtype)
        s, idx = search(queries, bank, gain)
        acc += s[:, 0].mean() + (idx[:, 0] % 97).float().mean() * 1e-3
        loop.end(i)
    loop.report("triton_rmsnorm", applied_fixes(args), "one search over the bank per iteration")
    print("checksum %.5f" % (acc.item() / args.iters))


if __name__ == "__main__":
    main()
