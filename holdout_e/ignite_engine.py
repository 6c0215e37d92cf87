"""Train a tabular classifier with a small Ignite-style Engine and event handlers.

An Engine runs a process function over a data source and fires events
(STARTED, ITERATION_STARTED, ITERATION_COMPLETED, COMPLETED) to the handlers
attached to it. The process function does online hard-example mining: the per-sample
losses of the batch are computed, the hardest quarter of the batch is kept, and the
step is taken on their mean loss. MLP, AdamW, CUDA events.
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


class Events:
    STARTED = "started"
    ITERATION_STARTED = "iteration_started"
    ITERATION_COMPLETED = "iteration_completed"
    COMPLETED = "completed"


class State:
    def __init__(self):
        self.iteration = 0
        self.batch = None
        self.output = None
        self.metrics = {}


class Engine:
    def __init__(self, process_fn):
        self.process_fn = process_fn
        self.state = State()
        self._handlers = {}

    def add_event_handler(self, event, fn, *args):
        self._handlers.setdefault(event, []).append((fn, args))

    def on(self, event):
        def deco(fn):
            self.add_event_handler(event, fn)
            return fn
        return deco

    def fire(self, event):
        for fn, args in self._handlers.get(event, []):
            fn(self, *args)

    def run(self, data, max_iters):
        self.fire(Events.STARTED)
        it = iter(data)
        for i in range(max_iters):
            self.state.iteration = i
            self.fire(Events.ITERATION_STARTED)
            self.state.batch = next(it)
            self.state.output = self.process_fn(self, self.state.batch)
            self.fire(Events.ITERATION_COMPLETED)
        self.fire(Events.COMPLETED)
        return self.state


class SyntheticStream:
    """Endless stream of (features, label) batches from a fixed random teacher."""

    def __init__(self, batch, dim, classes, dev):
        g = torch.Generator(device=dev)
        g.manual_seed(1)
        self.w = torch.randn(dim, classes, device=dev, generator=g) / dim ** 0.5
        self.batch, self.dim, self.dev = batch, dim, dev

    def __iter__(self):
        while True:
            x = torch.randn(self.batch, self.dim, device=self.dev)
            y = (x @ self.w + 0.5 * torch.randn(self.batch, self.w.shape[1], device=self.dev)).argmax(1)
            yield x, y


def hardest(losses, k):
    """Indices of the k largest per-sample losses, hardest first."""
    vals = [losses[j].item() for j in range(losses.shape[0])]
    order = sorted(range(len(vals)), key=lambda j: -vals[j])[:k]
    return torch.tensor(order, device=losses.device)


def hardest_topk(losses, k):
    return torch.topk(losses, k, sorted=True).indices


def make_trainer(model, opt, keep, select):
    def process(engine, batch):
        x, y = batch
        model.train()
        logits = model(x)
        per = F.cross_entropy(logits.float(), y, reduction="none")
        idx = select(per.detach(), keep)
        loss = per[idx].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return process


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, D, H, C = (2048, 1024, 8192, 100) if cuda else (64, 32, 64, 10)
    torch.manual_seed(0)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, H), nn.GELU(),
                          nn.Linear(H, H), nn.GELU(), nn.Linear(H, C)).to(dev)
    kw = dict(lr=1e-3, weight_decay=0.01)
    if cuda:
        kw["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **kw)
    select = hardest_topk if args.fixed else hardest
    trainer = Engine(make_trainer(model, opt, B // 4, select))
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)

    @trainer.on(Events.ITERATION_STARTED)
    def _begin(engine):
        loop.begin(engine.state.iteration)

    @trainer.on(Events.ITERATION_COMPLETED)
    def _accumulate(engine):
        total.add_(engine.state.output)
        loop.end(engine.state.iteration)

    @trainer.on(Events.COMPLETED)
    def _report(engine):
        engine.state.metrics["mean_hard_loss"] = total / args.iters

    state = trainer.run(SyntheticStream(B, D, C, dev), args.iters)
    loop.report("ignite_engine", applied_fixes(args), "one Engine iteration (AdamW step) per batch")
    print("mean hard-example loss %.4f" % state.metrics["mean_hard_loss"].item())


if __name__ == "__main__":
    main()
