"""ResNet-50 classifier training with a model EMA (weights averaged every step).

Batches come from a small Python generator pipeline over a device-resident uint8
image pool (random crop offsets + flips on the GPU). bf16 autocast, channels_last,
SGD with Nesterov momentum. The EMA copy is what gets evaluated at the end.
"""
import argparse, copy, json, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


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


class ModelEma:
    """Exponential moving average of a model's parameters and buffers."""

    def __init__(self, model, decay=0.9998, fast=False):
        self.ema = copy.deepcopy(model).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.decay, self.fast = decay, fast
        if fast:
            src = list(model.parameters()) + list(model.buffers())
            dst = list(self.ema.parameters()) + list(self.ema.buffers())
            pairs = list(zip(dst, src))
            self.f_dst = [d for d, s in pairs if d.dtype.is_floating_point]
            self.f_src = [s for d, s in pairs if d.dtype.is_floating_point]
            self.i_dst = [d for d, s in pairs if not d.dtype.is_floating_point]
            self.i_src = [s for d, s in pairs if not d.dtype.is_floating_point]

    @torch.no_grad()
    def update(self, model):
        if self.fast:
            torch._foreach_lerp_(self.f_dst, self.f_src, 1.0 - self.decay)
            torch._foreach_copy_(self.i_dst, self.i_src)
            return
        msd = model.state_dict()
        for k, ema_v in self.ema.state_dict().items():
            model_v = msd[k].detach()
            if ema_v.dtype.is_floating_point:
                ema_v.copy_(ema_v * self.decay + (1.0 - self.decay) * model_v)
            else:
                ema_v.copy_(model_v)


def batches(pool, labels, batch, crop, device):
    """Endless generator: random crops + horizontal flips of the pool, normalised."""
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    n, _, h, w = pool.shape
    while True:
        idx = torch.randint(0, n, (batch,), device=device)
        oy, ox = [int(v) for v in torch.randint(0, h - crop + 1, (2,)).tolist()]
        x = pool[idx, :, oy:oy + crop, ox:ox + crop].float()
        flip = torch.rand(batch, 1, 1, 1, device=device) < 0.5
        x = torch.where(flip, x.flip(3), x)
        x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
        yield x, labels[idx]


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    if cuda:
        model, batch, res, crop = torchvision.models.resnet50(num_classes=100), 64, 72, 64
    else:
        model, batch, res, crop = torchvision.models.resnet18(num_classes=100), 8, 40, 32
    model = model.to(dev).to(memory_format=torch.channels_last)
    ema = ModelEma(model, fast=args.fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                          weight_decay=5e-5, fused=cuda)
    pool = torch.randint(0, 256, (2048 if cuda else 64, 3, res, res), dtype=torch.uint8, device=dev)
    labels = torch.randint(0, 100, (pool.shape[0],), device=dev)
    data = batches(pool, labels, batch, crop, dev)
    loop = Loop(args, dev, timer="events")
    model.train()
    for i in range(args.iters):
        loop.begin(i)
        x, y = next(data)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        ema.update(model)
        loop.end(i)
    loop.report("ema_resnet", applied_fixes(args), "event before iteration 5 and before the end")
    with torch.no_grad():
        ema.ema(x[:4])


if __name__ == "__main__":
    main()
