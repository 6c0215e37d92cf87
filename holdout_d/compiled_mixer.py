"""TSMixer-style multivariate time-series forecaster, torch.compile'd training step.

Mixer blocks alternate an MLP over time and an MLP over channels, each with
LayerNorm, dropout and a residual; a linear head maps the 512-step look-back window
to the 96-step horizon. The forward + loss is compiled with torch.compile (default
mode); bf16 autocast; Adam with weight decay and a cosine schedule; windows are cut
from a device-resident series every step.
"""
import argparse, json, math, sys, time
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



class MixerBlock(nn.Module):
    def __init__(self, T, C, hid):
        super().__init__()
        self.nt, self.nc = nn.LayerNorm(C), nn.LayerNorm(C)
        self.t1, self.t2 = nn.Linear(T, T), nn.Linear(T, T)
        self.c1, self.c2 = nn.Linear(C, hid), nn.Linear(hid, C)

    def forward(self, x):  # x: (B, T, C)
        y = self.nt(x).transpose(1, 2)
        x = x + F.dropout(self.t2(F.relu(self.t1(y))), 0.1, self.training).transpose(1, 2)
        return x + F.dropout(self.c2(F.relu(self.c1(self.nc(x)))), 0.1, self.training)


class TSMixer(nn.Module):
    def __init__(self, T, H, C, hid, n):
        super().__init__()
        self.blocks = nn.ModuleList(MixerBlock(T, C, hid) for _ in range(n))
        self.head = nn.Linear(T, H)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x.transpose(1, 2)).transpose(1, 2)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, T, H, C, hid, n, length = 256, 512, 96, 128, 256, 8, 200_000
    else:
        B, T, H, C, hid, n, length = 8, 32, 8, 8, 16, 3, 2_000
    torch.manual_seed(0)
    series = torch.randn(length, C, device=dev).cumsum(0) * 0.01
    model = TSMixer(T, H, C, hid, n).to(dev)
    if args.fixed:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4, fused=cuda)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, 1000) / 1000)))

    @torch.compile
    def loss_fn(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            pred = model(x)
        return F.mse_loss(pred.float(), y)

    offs = torch.arange(T + H, device=dev)
    loop = Loop(args, dev, timer="events")
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        start = torch.randint(0, length - T - H, (B, 1), device=dev)
        win = series[start + offs]
        loss = loss_fn(win[:, :T], win[:, T:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.detach())
        loop.end(i)
    loop.report("compiled_mixer", applied_fixes(args), "CUDA events before step 5 and before the end of the timed range")
    print("mean loss %.5f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
