"""Inference benchmark of a linear-attention (kernelised, elu+1 feature map) encoder.

A stack of pre-norm encoder layers in which softmax attention is replaced by
phi(Q) phi(K)^T V / (phi(Q) phi(K)^T 1) with phi = elu + 1 (Katharopoulos et al.), written
with torch.einsum, followed by a GELU MLP. bf16 weights and activations under
torch.inference_mode. The script warms up, then times each forward call with
time.perf_counter() between torch.cuda.synchronize() calls.
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


def feature_map(x):
    return F.elu(x) + 1.0


def linear_attention(q, k, v, eps=1e-6):
    q, k = feature_map(q), feature_map(k)
    scores = torch.einsum("bhnd,bhmd->bhnm", q, k)
    num = torch.einsum("bhnm,bhme->bhne", scores, v)
    den = scores.sum(-1, keepdim=True)
    return num / (den + eps)


def linear_attention_assoc(q, k, v, eps=1e-6):
    q, k = feature_map(q), feature_map(k)
    kv = torch.einsum("bhmd,bhme->bhde", k, v)
    num = torch.einsum("bhnd,bhde->bhne", q, kv)
    den = torch.einsum("bhnd,bhd->bhn", q, k.sum(2)).unsqueeze(-1)
    return num / (den + eps)


class LinearAttentionLayer(nn.Module):
    attention = staticmethod(linear_attention)

    def __init__(self, d, heads, mlp):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = self.attention(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(B, N, D))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, d, heads, mlp, depth):
        super().__init__()
        self.layers = nn.ModuleList(LinearAttentionLayer(d, heads, mlp) for _ in range(depth))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def run_benchmark(model, x, loop, iters):
    checksum = torch.zeros((), device=x.device, dtype=torch.float32)
    with torch.inference_mode():
        for i in range(iters):
            loop.begin(i)
            y = model(x)
            checksum += y[:, 0].float().abs().mean()
            loop.end(i)
    return checksum


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, N, D, HEADS, MLP, DEPTH = (8, 2048, 1024, 16, 4096, 6) if cuda else (2, 128, 64, 4, 256, 2)
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    if args.fixed:
        LinearAttentionLayer.attention = staticmethod(linear_attention_assoc)
    model = Encoder(D, HEADS, MLP, DEPTH).to(dev, dtype).eval()
    x = torch.randn(B, N, D, device=dev, dtype=dtype)
    with torch.inference_mode():  # warm-up
        for _ in range(3):
            model(x)
    if cuda:
        torch.cuda.synchronize()
    loop = Loop(args, dev, timer="wall")
    checksum = run_benchmark(model, x, loop, args.iters)
    loop.report("linear_attn_bench", applied_fixes(args), "one encoder forward per call")
    print("checksum %.5f" % (checksum.item() / args.iters))


if __name__ == "__main__":
    main()
