"""Vision Transformer classifier training from a device-resident image pool.

A ViT (patch 8 on 64 x 64 images: 64 tokens + class token, 8 pre-norm encoder layers of
width 384 with 6 heads, GELU MLPs) for 200 classes. Batches are drawn by a generator from a
uint8 image pool on the GPU with random crops and flips done on the device. bf16 autocast,
attention through nn.TransformerEncoderLayer (scaled_dot_product_attention), fused AdamW with
a warm-up schedule, label smoothing, a `while` loop over steps; the loss is accumulated on
the device and read once at the end. Timed with CUDA events.
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


class ViT(nn.Module):
    def __init__(self, size, patch, d, depth, heads, classes):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, patch)
        n = (size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.encoder(x)[:, 0]))


def batches(pool, labels, B, size, gen):
    """Endless generator: random crops and flips of pool images, normalised on the device."""
    dev = pool.device
    mean = torch.tensor([0.48, 0.45, 0.40], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.27, 0.26, 0.28], device=dev).view(1, 3, 1, 1) * 255
    pad = pool.shape[-1] - size
    ar = torch.arange(size, device=dev)
    bi = torch.arange(B, device=dev).view(B, 1, 1, 1)
    ci = torch.arange(3, device=dev).view(1, 3, 1, 1)
    while True:
        idx = torch.randint(0, pool.shape[0], (B,), device=dev, generator=gen)
        oy, ox = torch.randint(0, pad + 1, (2, B), device=dev, generator=gen)
        rows = (oy[:, None] + ar).view(B, 1, size, 1)
        cols = (ox[:, None] + ar).view(B, 1, 1, size)
        x = pool[idx][bi, ci, rows, cols].float()
        flip = torch.rand(B, device=dev, generator=gen) < 0.5
        x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
        yield (x - mean) / std, labels[idx]


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    POOL, B, FULL, SIZE, D, DEPTH, HEADS, CLASSES = (4096, 256, 72, 64, 384, 8, 6, 200) if cuda \
        else (64, 8, 36, 32, 32, 2, 4, 10)
    torch.manual_seed(0)
    model = ViT(SIZE, 8, D, DEPTH, HEADS, CLASSES).to(dev)
    pool = torch.randint(0, 256, (POOL, 3, FULL, FULL), device=dev, dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (POOL,), device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(11)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05,
                            **({"fused": True} if cuda else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    data = batches(pool, labels, B, SIZE, gen)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    step = 0
    while step < args.iters:
        loop.begin(step)
        x, y = next(data)
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        total += loss.detach()
        loop.end(step)
        step += 1
    loop.report("vit_control", applied_fixes(args, control=True), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
