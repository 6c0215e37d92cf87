"""Action recognition training of a small R(2+1)D video network on synthetic clips.

Clips (16 frames, 112 x 112, uint8) live in a device-resident pool; a Python generator
yields random batches with random horizontal flips and per-channel normalisation done on the
GPU. The network is an R(2+1)D-style ResNet: a (3x7x7) stem, then residual blocks that
factorise every 3-D convolution into a spatial (1x3x3) and a temporal (3x1x1) convolution
with BatchNorm and ReLU, global pooling and a linear classifier. bf16 autocast, SGD with
Nesterov momentum, label smoothing. Timed with CUDA events.
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


def conv_bn(cin, cout, k, s=1, p=0):
    return nn.Sequential(nn.Conv3d(cin, cout, k, s, p, bias=False), nn.BatchNorm3d(cout), nn.ReLU(inplace=True))


class R2Plus1dBlock(nn.Module):
    def __init__(self, c, mid):
        super().__init__()
        self.spatial1 = conv_bn(c, mid, (1, 3, 3), 1, (0, 1, 1))
        self.temporal1 = conv_bn(mid, c, (3, 1, 1), 1, (1, 0, 0))
        self.spatial2 = conv_bn(c, mid, (1, 3, 3), 1, (0, 1, 1))
        self.temporal2 = nn.Sequential(nn.Conv3d(mid, c, (3, 1, 1), 1, (1, 0, 0), bias=False), nn.BatchNorm3d(c))

    def forward(self, x):
        y = self.temporal2(self.spatial2(self.temporal1(self.spatial1(x))))
        return F.relu(x + y)


class R2Plus1d(nn.Module):
    def __init__(self, width, blocks, classes):
        super().__init__()
        self.stem = conv_bn(3, width, (3, 7, 7), (1, 2, 2), (1, 3, 3))
        self.blocks = nn.Sequential(*[R2Plus1dBlock(width, width + width // 2) for _ in range(blocks)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3, 4)))


def clip_batches(pool, labels, batch, channels_last, gen):
    """Endless generator of normalised, randomly flipped clip batches (N, C, T, H, W)."""
    mean = torch.tensor([0.43, 0.39, 0.38], device=pool.device).view(1, 3, 1, 1, 1) * 255
    std = torch.tensor([0.23, 0.22, 0.22], device=pool.device).view(1, 3, 1, 1, 1) * 255
    while True:
        idx = torch.randint(0, pool.shape[0], (batch,), device=pool.device, generator=gen)
        clips = pool[idx].float()
        flip = torch.rand(batch, device=pool.device, generator=gen) < 0.5
        clips = torch.where(flip.view(-1, 1, 1, 1, 1), clips.flip(-1), clips)
        clips = (clips - mean) / std
        if channels_last:
            clips = clips.contiguous(memory_format=torch.channels_last_3d)
        yield clips, labels[idx]


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    POOL, B, T, HW, WIDTH, BLOCKS, CLASSES = (96, 16, 16, 112, 64, 4, 400) if cuda else (8, 2, 4, 32, 8, 1, 10)
    torch.manual_seed(0)
    model = R2Plus1d(WIDTH, BLOCKS, CLASSES).to(dev)
    if args.fixed:
        model = model.to(memory_format=torch.channels_last_3d)
    pool = torch.randint(0, 256, (POOL, 3, T, HW, HW), device=dev, dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (POOL,), device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(7)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    batches = clip_batches(pool, labels, B, args.fixed, gen)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i, (clips, y) in zip(range(args.iters), batches):
        loop.begin(i)
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(clips), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        loop.end(i)
    loop.report("video_r2p1d", applied_fixes(args), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
