"""Physics-informed neural network (PINN) for the 1-D advection equation.

Learns u(x, t) on [0, 1] x [0, 1] with u_t + c u_x = 0, u(x, 0) = sin(2 pi x) and periodic
boundaries, by minimising the PDE residual at random collocation points plus the initial-
and boundary-condition errors. The solution network is a tanh MLP; the derivatives u_x and
u_t come from autograd with create_graph=True, so the loss is differentiated twice. Plain
functions, fp32, Adam, `while` loop, CUDA events; the L2 error against the exact solution
sin(2 pi (x - c t)) is reported at the end.
"""
import argparse, json, math, sys, time
import torch
import torch.nn as nn

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

C_ADV = 0.5


def make_mlp(width, depth, dev):
    layers, d_in = [], 2
    for _ in range(depth):
        layers += [nn.Linear(d_in, width), nn.Tanh()]
        d_in = width
    layers.append(nn.Linear(d_in, 1))
    return nn.Sequential(*layers).to(dev)


def input_gradient_jacobian(net, xt):
    """du/d(x, t) for every collocation point, from the Jacobian of the network output."""
    n = xt.shape[0]
    J = torch.autograd.functional.jacobian(net, xt, create_graph=True, vectorize=True)  # (n, 1, n, 2)
    idx = torch.arange(n, device=xt.device)
    return J[idx, 0, idx]


def input_gradient_autograd(net, xt):
    """du/d(x, t) for every collocation point, one backward pass of sum(u)."""
    u = net(xt)
    return torch.autograd.grad(u, xt, torch.ones_like(u), create_graph=True)[0]


def sample_points(n_col, n_bc, gen, dev):
    col = torch.rand(n_col, 2, generator=gen, device=dev)
    x0 = torch.rand(n_bc, 1, generator=gen, device=dev)
    ic = torch.cat([x0, torch.zeros_like(x0)], 1)
    tb = torch.rand(n_bc, 1, generator=gen, device=dev)
    left, right = torch.cat([torch.zeros_like(tb), tb], 1), torch.cat([torch.ones_like(tb), tb], 1)
    return col, ic, x0, left, right


def pinn_loss(net, grad_fn, col, ic, x0, left, right):
    col = col.requires_grad_(True)
    du = grad_fn(net, col)
    residual = du[:, 1] + C_ADV * du[:, 0]
    loss_pde = residual.pow(2).mean()
    loss_ic = (net(ic).squeeze(1) - torch.sin(2 * math.pi * x0.squeeze(1))).pow(2).mean()
    loss_bc = (net(left) - net(right)).pow(2).mean()
    return loss_pde + 10.0 * loss_ic + loss_bc


def l2_error(net, dev):
    x = torch.linspace(0, 1, 101, device=dev)
    X, T = torch.meshgrid(x, x, indexing="ij")
    xt = torch.stack([X.flatten(), T.flatten()], 1)
    with torch.no_grad():
        exact = torch.sin(2 * math.pi * (xt[:, 0] - C_ADV * xt[:, 1]))
        return ((net(xt).squeeze(1) - exact).norm() / exact.norm()).item()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda":
        N_COL, N_BC, WIDTH, DEPTH = 512, 256, 256, 5
    else:
        N_COL, N_BC, WIDTH, DEPTH = 48, 16, 32, 3
    torch.manual_seed(0)
    net = make_mlp(WIDTH, DEPTH, dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    grad_fn = input_gradient_autograd if args.fixed else input_gradient_jacobian
    gen = torch.Generator(device=dev).manual_seed(1)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    it = 0
    while it < args.iters:
        loop.begin(it)
        pts = sample_points(N_COL, N_BC, gen, dev)
        loss = pinn_loss(net, grad_fn, *pts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        loop.end(it)
        it += 1
    loop.report("pinn_jacobian", applied_fixes(args), "one collocation step per iteration")
    print("mean loss %.5f  rel L2 error %.4f" % (total.item() / args.iters, l2_error(net, dev)))


if __name__ == "__main__":
    main()
