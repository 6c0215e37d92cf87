"""Sequence classification with a Keras-like wrapper: Model.compile(...) then Model.fit(...).

A pre-norm transformer encoder (nn.TransformerEncoder) classifies synthetic token
sequences; the wrapper owns the optimizer (fused AdamW), the loss, bf16 autocast and a
History, and calls callbacks around every training batch. CUDA events.
"""
import argparse, json, sys, time
from contextlib import nullcontext
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


class Callback:
    def on_train_batch_begin(self, i): pass
    def on_train_batch_end(self, i, logs): pass


class HarnessCallback(Callback):
    def __init__(self, loop): self.loop = loop
    def on_train_batch_begin(self, i): self.loop.begin(i)
    def on_train_batch_end(self, i, logs): self.loop.end(i)


class Model:
    def __init__(self, net, device):
        self.net, self.device = net.to(device), device
        self.history = {"loss": []}

    def compile(self, optimizer, loss, mixed_precision=True, offload_activations=False):
        self.opt, self.loss_fn = optimizer, loss
        self.amp = mixed_precision and self.device.type == "cuda"
        self.offload = offload_activations   # keep saved activations in host memory

    def train_step(self, x, y):
        ctx = (torch.autograd.graph.save_on_cpu(pin_memory=self.device.type == "cuda")
               if self.offload else nullcontext())
        with ctx, torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            loss = self.loss_fn(self.net(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
        self.opt.step()
        return loss.detach()

    def fit(self, data, steps, callbacks=()):
        for i in range(steps):
            for cb in callbacks:
                cb.on_train_batch_begin(i)
            x, y = next(data)
            loss = self.train_step(x, y)
            self.history["loss"].append(loss)
            for cb in callbacks:
                cb.on_train_batch_end(i, {"loss": loss})
        return self.history


class Classifier(nn.Module):
    def __init__(self, vocab, d, heads, layers, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


def batches(B, S, vocab, dev):
    while True:
        ids = torch.randint(0, vocab, (B, S), device=dev)
        yield ids, ids[:, 0] % 10


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, S, D, H, L = (8, 1024, 1024, 16, 6) if cuda else (2, 16, 32, 4, 2)
    torch.manual_seed(0)
    model = Model(Classifier(32000, D, H, L, 10), dev)
    model.compile(torch.optim.AdamW(model.net.parameters(), lr=3e-4, fused=cuda), F.cross_entropy,
                  offload_activations=not args.fixed)
    loop = Loop(args, dev)
    hist = model.fit(batches(B, S, 32000, dev), args.iters, callbacks=[HarnessCallback(loop)])
    loop.report("keras_fit", applied_fixes(args), "one fit() batch per iteration")
    print("final loss %.4f" % hist["loss"][-1].item())


if __name__ == "__main__":
    main()
