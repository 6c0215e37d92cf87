"""Audio Spectrogram Transformer (AST-style) tagging with a small callback-based Trainer.

Log-mel spectrograms (128 mel bins x 1024 frames) are cut into 16 x 16 patches with a strided
Conv2d, a class token and learned positions are added, and a stack of pre-norm encoder blocks
built on nn.MultiheadAttention classifies the clip into 527 multi-label classes (BCE loss).
A Trainer class runs fit() and calls its callbacks (debugging, learning-rate warm-up, loss
tracking) around the steps. Spectrograms are synthetic and made on the GPU; bf16 autocast,
fused AdamW. Timed with CUDA events.
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

FIXES = ("attn", "anomaly")


class EncoderBlock(nn.Module):
    return_attention = True

    def __init__(self, d, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        a, _ = self.attn(h, h, h, need_weights=self.return_attention)
        x = x + a
        return x + self.mlp(self.norm2(x))


class AST(nn.Module):
    def __init__(self, mels, frames, patch, d, depth, heads, classes):
        super().__init__()
        self.patch = nn.Conv2d(1, d, patch, patch)
        n = (mels // patch) * (frames // patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(d, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, spec):
        x = self.patch(spec.unsqueeze(1)).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, 0]))


class Callback:
    def on_fit_start(self, trainer): pass
    def on_step_start(self, trainer, step): pass
    def on_step_end(self, trainer, step, loss): pass
    def on_fit_end(self, trainer): pass


class DebugCallback(Callback):
    """Turns on autograd anomaly detection so that a NaN points at the op that made it."""

    def __init__(self, detect_anomaly=True):
        self.detect_anomaly = detect_anomaly

    def on_fit_start(self, trainer):
        torch.autograd.set_detect_anomaly(self.detect_anomaly)

    def on_fit_end(self, trainer):
        torch.autograd.set_detect_anomaly(False)


class WarmupCallback(Callback):
    def __init__(self, base_lr, warmup):
        self.base_lr, self.warmup = base_lr, warmup

    def on_step_start(self, trainer, step):
        for g in trainer.opt.param_groups:
            g["lr"] = self.base_lr * min(1.0, (step + 1) / self.warmup)


class LossTracker(Callback):
    def on_fit_start(self, trainer):
        self.total = torch.zeros((), device=trainer.device)

    def on_step_end(self, trainer, step, loss):
        self.total += loss


class Trainer:
    def __init__(self, model, opt, device, callbacks, loop):
        self.model, self.opt, self.device, self.callbacks, self.loop = model, opt, device, callbacks, loop
        self.cuda = device.type == "cuda"

    def _call(self, hook, *a):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *a)

    def training_step(self, spec, target):
        with torch.autocast("cuda" if self.cuda else "cpu", dtype=torch.bfloat16, enabled=self.cuda):
            logits = self.model(spec)
        loss = F.binary_cross_entropy_with_logits(logits.float(), target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def fit(self, batches, steps):
        self._call("on_fit_start")
        for step in range(steps):
            self.loop.begin(step)
            self._call("on_step_start", step)
            spec, target = next(batches)
            self._call("on_step_end", step, self.training_step(spec, target))
            self.loop.end(step)
        self._call("on_fit_end")


def synthetic_clips(B, mels, frames, classes, dev):
    proto = torch.randn(classes, mels, 1, device=dev)
    while True:
        target = (torch.rand(B, classes, device=dev) < 0.02).float()
        spec = torch.randn(B, mels, frames, device=dev) + (target @ proto.flatten(1)).view(B, mels, 1) * 0.1
        yield spec, target


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, MELS, FRAMES, D, DEPTH, HEADS = (16, 128, 1024, 768, 6, 12) if cuda else (2, 32, 64, 64, 2, 4)
    CLASSES = 527
    torch.manual_seed(0)
    if "attn" in fixes:
        EncoderBlock.return_attention = False
    model = AST(MELS, FRAMES, 16, D, DEPTH, HEADS, CLASSES).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05,
                            **({"fused": True} if cuda else {}))
    loop = Loop(args, dev)
    tracker = LossTracker()
    callbacks = [DebugCallback(detect_anomaly="anomaly" not in fixes), WarmupCallback(1e-4, 10), tracker]
    Trainer(model, opt, dev, callbacks, loop).fit(synthetic_clips(B, MELS, FRAMES, CLASSES, dev), args.iters)
    loop.report("ast_trainer", fixes, "one training step per iteration")
    print("mean loss %.5f" % (tracker.total.item() / args.iters))


if __name__ == "__main__":
    main()
