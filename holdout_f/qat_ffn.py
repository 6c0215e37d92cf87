"""Quantisation-aware fine-tuning of a token MLP tagger with int8 fake quantisation.

Four pre-norm residual feed-forward blocks (1024 -> 4096 -> 1024, GELU) over 32 x 512 tokens
and a 256-way per-token classifier. Every Linear sees int8-fake-quantised inputs and
weights (symmetric per-tensor scales calibrated on the first batch, straight-through
gradients inside the clipping range), as QAT recipes do before export. fp32 training with
TF32 matmuls, fused AdamW, synthetic tokens made on the GPU. Timed with CUDA events.
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


QMIN, QMAX = -128, 127


def fake_quant(x, scale):
    lo, hi = QMIN * scale, QMAX * scale
    xc = torch.clamp(x, lo, hi)
    q = torch.round(xc / scale) * scale
    return xc + (q - xc).detach()


def fake_quant_fused(x, scale):
    return torch.fake_quantize_per_tensor_affine(x, scale, 0, QMIN, QMAX)


class QLinear(nn.Linear):
    fq = staticmethod(fake_quant)

    def calibrate(self, x):
        self.act_scale = float(x.detach().abs().amax()) / QMAX
        self.w_scale = float(self.weight.detach().abs().amax()) / QMAX

    def forward(self, x):
        if not hasattr(self, "act_scale"):
            self.calibrate(x)
        return F.linear(self.fq(x, self.act_scale), self.fq(self.weight, self.w_scale), self.bias)


class FFNBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = QLinear(dim, hidden)
        self.fc2 = QLinear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Tagger(nn.Module):
    def __init__(self, vocab, dim, hidden, depth, classes):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([FFNBlock(dim, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = QLinear(dim, classes)

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, S, DIM, HID, DEPTH = (32, 512, 1024, 4096, 4) if cuda else (4, 64, 64, 256, 2)
    VOCAB, CLASSES = 8192, 256
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    if args.fixed:
        QLinear.fq = staticmethod(fake_quant_fused)
    model = Tagger(VOCAB, DIM, HID, DEPTH, CLASSES).to(dev)
    table = torch.randint(0, CLASSES, (VOCAB,), device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **({"fused": True} if cuda else {}))
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        ids = torch.randint(0, VOCAB, (B, S), device=dev)
        target = table[torch.roll(ids, 1, dims=1)]
        loss = F.cross_entropy(model(ids).flatten(0, 1), target.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        loop.end(i)
    loop.report("qat_ffn", applied_fixes(args), "one QAT training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
