"""Boris-pusher simulation of charged test particles in a magnetic mirror with a wave field.

Particle state is one (N, 8) float32 array, one row per particle
(x, y, z, vx, vy, vz, q/m, weight), as in the particle dump format. Each iteration is a
diagnostic interval of 4 time steps; the kinetic energy is accumulated on the device.
No autograd. CUDA events.
"""
import argparse, json, math, sys, time
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


X, Y, Z, VX, VY, VZ, QM, W = range(8)


def push(P, col, t, dt, B0=1.0, L=4.0, E0=0.05, k=1.5, w=0.7):
    """One Boris step; col(P, j) returns particle attribute j for all particles."""
    z = col(P, Z)
    bx = -B0 * col(P, X) * z / L ** 2
    by = -B0 * col(P, Y) * z / L ** 2
    bz = B0 * (1 + (z / L) ** 2)
    phase = k * z - w * t
    ex = E0 * torch.sin(phase)
    ey = E0 * torch.cos(phase)
    h = col(P, QM) * (0.5 * dt)
    ux = col(P, VX) + h * ex
    uy = col(P, VY) + h * ey
    uz = col(P, VZ)
    tx, ty, tz = h * bx, h * by, h * bz
    s = 2.0 / (1.0 + tx * tx + ty * ty + tz * tz)
    px = ux + (uy * tz - uz * ty)
    py = uy + (uz * tx - ux * tz)
    pz = uz + (ux * ty - uy * tx)
    col(P, VX).copy_(ux + (py * tz - pz * ty) * s + h * ex)
    col(P, VY).copy_(uy + (pz * tx - px * tz) * s + h * ey)
    col(P, VZ).copy_(uz + (px * ty - py * tx) * s)
    col(P, X).add_(col(P, VX) * dt)
    col(P, Y).add_(col(P, VY) * dt)
    col(P, Z).add_(col(P, VZ) * dt)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    N = (1 << 24) if dev.type == "cuda" else 4096
    g = torch.Generator(device=dev).manual_seed(0)
    P = torch.empty(N, 8, device=dev)
    P[:, :3].normal_(0, 1, generator=g)
    P[:, 3:6].normal_(0, 0.3, generator=g)
    P[:, QM] = 1.0
    P[:, W] = 1.0 / N
    if args.fixed:
        P = P.t().contiguous()
        col = lambda A, j: A[j]
    else:
        col = lambda A, j: A[:, j]
    dt, t = 0.05, 0.0
    ke = torch.zeros((), device=dev)
    loop = Loop(args, dev)
    for i in range(args.iters):
        loop.begin(i)
        for _ in range(4):
            push(P, col, t, dt)
            t += dt
        ke += (col(P, W) * (col(P, VX) ** 2 + col(P, VY) ** 2 + col(P, VZ) ** 2)).sum()
        loop.end(i)
    loop.report("particle_pusher", applied_fixes(args), "one diagnostic interval (4 Boris steps) per iteration")
    print("mean kinetic energy %.5f" % (0.5 * ke.item() / args.iters))


if __name__ == "__main__":
    main()
