"""Price an arithmetic-average Asian call under the Heston model by Monte Carlo.

Paths are simulated with a full-truncation Euler scheme on the device: at each time
step two correlated Gaussian increments drive the log-price and the variance, and the
running sum of prices is accumulated for the average. One iteration prices the option
once (all paths, all time steps) and returns the discounted mean payoff and its
standard error. No autograd. Timed with CUDA events.
"""
import argparse, json, sys, time, math
import torch

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


def heston_step(S, v, A, z1, z2, dt, r, kappa, theta, xi, rho):
    vp = torch.clamp(v, min=0.0)
    sv = torch.sqrt(vp)
    w2 = rho * z1 + math.sqrt(1.0 - rho * rho) * z2
    drift = (r - 0.5 * vp) * dt
    S = S * torch.exp(drift + sv * z1 * math.sqrt(dt))
    v = v + kappa * (theta - vp) * dt + xi * sv * w2 * math.sqrt(dt)
    A = A + S
    return S, v, A


class HestonAsian:
    def __init__(self, s0=100.0, v0=0.04, r=0.03, kappa=1.5, theta=0.04, xi=0.5, rho=-0.7,
                 strike=100.0, maturity=1.0, steps=32):
        self.s0, self.v0, self.r = s0, v0, r
        self.params = (kappa, theta, xi, rho)
        self.K, self.T, self.steps = strike, maturity, steps
        self.step_fn = heston_step

    def compile(self):
        self.step_fn = torch.compile(heston_step, dynamic=False)

    def price(self, n_paths, dev):
        dt = self.T / self.steps
        S = torch.full((n_paths,), self.s0, device=dev)
        v = torch.full((n_paths,), self.v0, device=dev)
        A = torch.zeros(n_paths, device=dev)
        for _ in range(self.steps):
            z = torch.randn(2, n_paths, device=dev)
            S, v, A = self.step_fn(S, v, A, z[0], z[1], dt, self.r, *self.params)
        payoff = torch.clamp(A / self.steps - self.K, min=0.0) * math.exp(-self.r * self.T)
        return payoff.mean(), payoff.std() / math.sqrt(n_paths)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    n_paths, steps = (8 * 2 ** 20, 32) if cuda else (4096, 8)
    torch.manual_seed(0)
    model = HestonAsian(steps=steps)
    if args.fixed:
        model.compile()
    loop = Loop(args, dev)
    prices, errs = [], []
    for i in range(args.iters):
        loop.begin(i)
        p, e = model.price(n_paths, dev)
        prices.append(p)
        errs.append(e)
        loop.end(i)
    loop.report("mc_pricer", applied_fixes(args), "one full Monte-Carlo pricing per iteration")
    print("price %.5f +- %.5f" % (torch.stack(prices).mean().item(), torch.stack(errs).mean().item() / len(errs) ** 0.5))


if __name__ == "__main__":
    main()
