"""Differentially private training (DP-SGD) of an MLP classifier on synthetic digit images.

Each step clips every example's gradient to L2 norm C, sums the clipped gradients, adds
Gaussian noise of scale sigma * C and takes a plain SGD step (hand-written update, no
torch.optim). The model is an nn.Module evaluated through torch.func.functional_call on a
dict of parameters. Steps run in a `while` loop over a fixed budget. Timed with CUDA events.
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

from torch.func import functional_call, grad, vmap


class MLP(nn.Module):
    def __init__(self, d_in, hidden, classes):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def sample_loss(model, params, x, y):
    logits = functional_call(model, params, (x.unsqueeze(0),))
    return F.cross_entropy(logits, y.unsqueeze(0))


def clipped_grad_sum_loop(model, params, xb, yb, clip):
    """Per-example gradients one example at a time, clipped and summed."""
    names = list(params)
    summed = {n: torch.zeros_like(p) for n, p in params.items()}
    for j in range(xb.shape[0]):
        g = torch.autograd.grad(sample_loss(model, params, xb[j], yb[j]), [params[n] for n in names])
        norm = torch.sqrt(sum(gi.pow(2).sum() for gi in g))
        factor = (clip / (norm + 1e-6)).clamp(max=1.0)
        for n, gi in zip(names, g):
            summed[n].add_(gi * factor)
    return summed


def clipped_grad_sum_vmap(model, params, xb, yb, clip):
    """Per-example gradients for the whole batch with torch.func.vmap(grad(...))."""
    detached = {n: p.detach() for n, p in params.items()}
    per = vmap(grad(lambda p, x, y: sample_loss(model, p, x, y)), in_dims=(None, 0, 0))(detached, xb, yb)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per.values()))
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    return {n: torch.einsum("b,b...->...", factor, g) for n, g in per.items()}


def dp_sgd_step(model, params, xb, yb, gen, lr, clip, sigma, fixed):
    fn = clipped_grad_sum_vmap if fixed else clipped_grad_sum_loop
    summed = fn(model, params, xb, yb, clip)
    with torch.no_grad():
        for n, p in params.items():
            noise = torch.randn(p.shape, device=p.device, generator=gen)
            p.sub_(lr * (summed[n] + sigma * clip * noise) / xb.shape[0])


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, D_IN, HID, CLASSES = (128, 1024, 1536, 10) if cuda else (8, 64, 64, 10)
    torch.manual_seed(0)
    model = MLP(D_IN, HID, CLASSES).to(dev)
    params = dict(model.named_parameters())
    protos = torch.randn(CLASSES, D_IN, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)
    loop = Loop(args, dev)
    seen = torch.zeros((), device=dev)
    step = 0
    while step < args.iters:
        loop.begin(step)
        yb = torch.randint(0, CLASSES, (B,), device=dev)
        xb = protos[yb] + 0.5 * torch.randn(B, D_IN, device=dev)
        dp_sgd_step(model, params, xb, yb, gen, lr=0.5, clip=1.0, sigma=0.8, fixed=args.fixed)
        with torch.no_grad():
            seen += (model(xb).argmax(1) == yb).float().mean()
        loop.end(step)
        step += 1
    loop.report("dpsgd_per_sample", applied_fixes(args), "one DP-SGD step per iteration")
    print("mean train acc %.4f  |w1| %.6f" % (seen.item() / args.iters, params["fc1.weight"].norm().item()))


if __name__ == "__main__":
    main()
