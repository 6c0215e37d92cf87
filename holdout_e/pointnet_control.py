"""PointNet point-cloud classification, batched inference.

Each tick classifies a batch of 256 synthetic point clouds (4096 points each: noisy
samples from the surfaces of spheres, boxes and cylinders with random scales and
rotations, generated on the device). The network is the classic PointNet: a learned 3x3
input transform (T-Net), a shared per-point MLP 3-64-128-1024 with BatchNorm (folded
into the Linear layers for inference), global max pooling and an MLP classifier head.
Points are kept point-major (B, N, 3) so every shared layer is one GEMM.
inference_mode, bf16 autocast; predictions are counted on the device and copied to the
host once after the loop. Timed with CUDA events.
"""
import argparse, json, sys, time, math
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


def shared_mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class PerPoint(nn.Module):
    """Applies a shared MLP to (B, N, C) point features as one (B*N, C) batch."""

    def __init__(self, sizes):
        super().__init__()
        self.mlp = shared_mlp(sizes)

    def forward(self, x):
        B, N, C = x.shape
        return self.mlp(x.reshape(B * N, C)).view(B, N, -1)


class TNet(nn.Module):
    def __init__(self, k=3):
        super().__init__()
        self.k = k
        self.point = PerPoint([k, 64, 128, 1024])
        self.head = nn.Sequential(nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                  nn.Linear(256, k * k))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x):
        g = self.point(x).amax(1)
        m = self.head(g).view(-1, self.k, self.k)
        return m + torch.eye(self.k, device=x.device, dtype=m.dtype)


class PointNet(nn.Module):
    def __init__(self, classes=40):
        super().__init__()
        self.tnet = TNet(3)
        self.point1 = PerPoint([3, 64, 64])
        self.point2 = PerPoint([64, 128, 1024])
        self.head = nn.Sequential(nn.Linear(1024, 512), nn.BatchNorm1d(512), nn.ReLU(),
                                  nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(),
                                  nn.Linear(256, classes))

    def forward(self, pts):
        x = torch.bmm(pts, self.tnet(pts).to(pts.dtype))
        x = self.point2(self.point1(x))
        return self.head(x.amax(1))


@torch.no_grad()
def fold_batchnorm(model):
    """Fold every eval-mode BatchNorm1d into the Linear right before it (inference only)."""
    for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        mods = list(seq)
        for j in range(1, len(mods)):
            lin, bn = mods[j - 1], mods[j]
            if isinstance(lin, nn.Linear) and isinstance(bn, nn.BatchNorm1d):
                s = bn.weight / torch.sqrt(bn.running_var + bn.eps)
                lin.weight.mul_(s[:, None])
                lin.bias.copy_((lin.bias - bn.running_mean) * s + bn.bias)
                seq[j] = nn.Identity()
    return model


def random_rotation(B, dev):
    q = F.normalize(torch.randn(B, 4, device=dev), dim=1)
    w, x, y, z = q.unbind(1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], 1).view(B, 3, 3)


def make_clouds(B, N, dev):
    """Points on a sphere, box or cylinder surface per cloud, scaled, rotated, jittered."""
    kind = torch.randint(0, 3, (B, 1, 1), device=dev)
    u = torch.randn(B, N, 3, device=dev)
    sphere = F.normalize(u, dim=-1)
    box = u / u.abs().amax(-1, keepdim=True)
    ang = torch.rand(B, N, device=dev) * (2 * math.pi)
    cyl = torch.stack([ang.cos(), ang.sin(), torch.rand(B, N, device=dev) * 2 - 1], -1)
    pts = torch.where(kind == 0, sphere, torch.where(kind == 1, box, cyl))
    pts = pts * (0.5 + torch.rand(B, 1, 3, device=dev))
    pts = torch.bmm(pts, random_rotation(B, dev)) + 0.01 * torch.randn(B, N, 3, device=dev)
    return pts


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, N, classes = (256, 4096, 40) if cuda else (4, 64, 40)
    torch.manual_seed(0)
    model = fold_batchnorm(PointNet(classes).to(dev).eval())
    counts = torch.zeros(classes, dtype=torch.long, device=dev)
    loop = Loop(args, dev)
    with torch.inference_mode(), torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda):
        for i in range(args.iters):
            loop.begin(i)
            pts = make_clouds(B, N, dev)
            pred = model(pts).argmax(1)
            counts.index_add_(0, pred, torch.ones_like(pred))
            loop.end(i)
    loop.report("pointnet_control", applied_fixes(args, control=True), "one batch of point clouds per tick")
    c = counts.cpu()
    print("classified %d clouds, most frequent class %d" % (int(c.sum()), int(c.argmax())))


if __name__ == "__main__":
    main()
