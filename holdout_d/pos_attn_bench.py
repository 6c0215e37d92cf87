"""Benchmark of a stack of pre-norm transformer encoder layers written as plain functions.

No nn.Module: the weights are raw bf16 tensors in a list of dicts, `encode(x, layers)`
adds sinusoidal absolute positions to the input and applies the layers (LayerNorm,
SDPA self-attention, GELU MLP, residuals). The script times calls 5..N-1 of `encode`
with the wall clock and torch.cuda.synchronize().
"""
import argparse, json, math, sys, time
import torch
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



def sinusoid_table(seq, dim):
    pos = torch.arange(seq, dtype=torch.float64)[:, None]
    inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    ang = pos * inv
    tab = torch.empty(seq, dim, dtype=torch.float64)
    tab[:, 0::2] = torch.sin(ang)
    tab[:, 1::2] = torch.cos(ang)
    return tab


def make_layers(n, dim, device, dtype):
    g = torch.Generator().manual_seed(0)
    def w(*shape):
        return (torch.randn(*shape, generator=g) / math.sqrt(shape[-1])).to(device, dtype)
    return [dict(ln1=torch.ones(dim, device=device, dtype=dtype), qkv=w(3 * dim, dim), proj=w(dim, dim),
                 ln2=torch.ones(dim, device=device, dtype=dtype), fc1=w(4 * dim, dim), fc2=w(dim, 4 * dim))
            for _ in range(n)]


def layer(x, p, heads):
    B, S, E = x.shape
    h = F.layer_norm(x, (E,), p["ln1"])
    q, k, v = F.linear(h, p["qkv"]).view(B, S, 3, heads, E // heads).permute(2, 0, 3, 1, 4)
    a = F.scaled_dot_product_attention(q, k, v)
    x = x + F.linear(a.transpose(1, 2).reshape(B, S, E), p["proj"])
    h = F.layer_norm(x, (E,), p["ln2"])
    return x + F.linear(F.gelu(F.linear(h, p["fc1"])), p["fc2"])


def encode(x, layers, heads, pos=None):
    if pos is None:
        pos = sinusoid_table(x.shape[1], x.shape[2]).to(x.device).to(x.dtype)
    x = x + pos
    for p in layers:
        x = layer(x, p, heads)
    return x


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, S, E, H, L = (8, 4096, 1024, 16, 4) if cuda else (2, 128, 64, 4, 2)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    layers = make_layers(L, E, dev, dtype)
    x = torch.randn(B, S, E, device=dev, dtype=dtype)
    pos = sinusoid_table(S, E).to(dev, dtype) if args.fixed else None
    loop = Loop(args, dev, timer="wall")
    acc = torch.zeros((), device=dev)
    with torch.no_grad():
        for i in range(args.iters):
            loop.begin(i)
            y = encode(x, layers, H, pos)
            acc += y[:, 0].float().mean()
            loop.end(i)
    loop.report("pos_attn_bench", applied_fixes(args), "benchmark: wall clock around calls of encode()")
    print("checksum %.5f" % acc.item())


if __name__ == "__main__":
    main()
