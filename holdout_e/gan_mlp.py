"""Train a GAN on synthetic 1024-dimensional feature vectors (a mixture of 64 Gaussians).

An MLP generator and an MLP discriminator, non-saturating logistic loss, two Adam
optimizers, one discriminator step and one generator step per iteration, bf16 autocast.
Timed with CUDA events.
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


def mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.LeakyReLU(0.2)]
    return nn.Sequential(*layers[:-1])


class GAN:
    def __init__(self, zdim, xdim, width, dev, amp_device):
        self.G = mlp([zdim, width, width, width, xdim]).to(dev)
        self.D = mlp([xdim, width, width, 1]).to(dev)
        kw = dict(lr=2e-4, betas=(0.5, 0.999))
        if dev.type == "cuda":
            kw["fused"] = True
        self.opt_g = torch.optim.Adam(self.G.parameters(), **kw)
        self.opt_d = torch.optim.Adam(self.D.parameters(), **kw)
        self.zdim, self.dev, self.amp_device = zdim, dev, amp_device

    def autocast(self):
        return torch.autocast(device_type=self.amp_device, dtype=torch.bfloat16)

    def step(self, real):
        z = torch.randn(real.shape[0], self.zdim, device=self.dev)
        with self.autocast():
            fake = self.G(z)
            d_loss = F.softplus(-self.D(real)).mean() + F.softplus(self.D(fake.detach())).mean()
        self.opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        self.opt_d.step()
        with self.autocast():
            g_loss = F.softplus(-self.D(fake)).mean()
        self.opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        self.opt_g.step()
        return d_loss.detach(), g_loss.detach()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, Z, X, W = (4096, 512, 1024, 4096) if cuda else (64, 16, 32, 64)
    torch.manual_seed(0)
    centers = torch.randn(64, X, device=dev) * 3
    # mixed precision setting carried over from the original CPU prototype
    gan = GAN(Z, X, W, dev, amp_device=dev.type if args.fixed else "cpu")
    loop = Loop(args, dev)
    dl = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        idx = torch.randint(0, 64, (B,), device=dev)
        real = centers[idx] + 0.1 * torch.randn(B, X, device=dev)
        d, g = gan.step(real)
        dl += d
        loop.end(i)
    loop.report("gan_mlp", applied_fixes(args), "one D step + one G step per iteration")
    print("mean d_loss %.4f" % (dl.item() / args.iters))


if __name__ == "__main__":
    main()
