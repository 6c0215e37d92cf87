"""Tabular regression MLP trained from a torch DataLoader over an in-memory TensorDataset.

Every training step is followed by a no_grad evaluation on a fixed device-resident
validation batch; the validation MSE is accumulated on the device and printed at the end.
bf16 autocast, fused AdamW, OneCycleLR. CUDA events.
"""
import argparse, json, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

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


def make_mlp(f, w):
    return nn.Sequential(nn.Linear(f, w), nn.SiLU(), nn.Linear(w, w), nn.SiLU(),
                         nn.Linear(w, w), nn.SiLU(), nn.Linear(w, 1))


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    N, F_, B, W = (400_000, 256, 8192, 4096) if cuda else (4096, 16, 256, 32)
    torch.manual_seed(0)
    X = torch.randn(N, F_)
    y = (X[:, :8].sum(1, keepdim=True) + 0.1 * torch.randn(N, 1))
    ds = TensorDataset(X, y)
    if args.fixed:
        loader = DataLoader(ds, sampler=BatchSampler(RandomSampler(ds), B, drop_last=True),
                            batch_size=None, pin_memory=cuda)
    else:
        loader = DataLoader(ds, batch_size=B, shuffle=True, drop_last=True)
    xv, yv = X[:2 * B].to(dev), y[:2 * B].to(dev)
    model = make_mlp(F_, W).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=args.iters + 1)
    loop = Loop(args, dev)
    val = torch.zeros((), device=dev)
    it, i = iter(loader), 0
    while i < args.iters:
        loop.begin(i)
        try:
            xb, yb = next(it)
        except StopIteration:
            it = iter(loader)
            xb, yb = next(it)
        xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
        model.train()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.mse_loss(model(xb).float(), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        model.eval()
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            val += F.mse_loss(model(xv).float(), yv)
        loop.end(i)
        i += 1
    loop.report("tabular_eval", applied_fixes(args), "one training step + one validation batch")
    print("mean val mse %.4f" % (val.item() / args.iters))


if __name__ == "__main__":
    main()
