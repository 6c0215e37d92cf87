"""Semantic-segmentation UNet training on device-resident synthetic images.

Four-level UNet (conv-BN-ReLU double convs, max-pool down, transposed-conv up, skip
concatenation), 19 classes at 256x256, bf16 autocast, channels_last, fused AdamW with a
one-cycle-style LambdaLR schedule. Random crops and flips are applied on the GPU; the
loss is accumulated on the device and read once at the end.
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



def dconv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, w, classes):
        super().__init__()
        ch = [w, 2 * w, 4 * w, 8 * w]
        self.downs = nn.ModuleList([dconv(3, ch[0])] + [dconv(ch[i - 1], ch[i]) for i in range(1, 4)])
        self.mid = dconv(ch[3], 2 * ch[3])
        self.ups = nn.ModuleList(nn.ConvTranspose2d(2 * c, c, 2, 2) for c in reversed(ch))
        self.upconvs = nn.ModuleList(dconv(2 * c, c) for c in reversed(ch))
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        skips = []
        for d in self.downs:
            x = d(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for up, uc, s in zip(self.ups, self.upconvs, reversed(skips)):
            x = uc(torch.cat([up(x), s], 1))
        return self.head(x)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, src, crop, w, classes = (32, 320, 256, 32, 19) if cuda else (2, 40, 32, 4, 5)
    torch.manual_seed(0)
    model = UNet(w, classes).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, fused=cuda)
    total = 1000
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / total)))
    images = torch.randint(0, 256, (4 * B, 3, src, src), dtype=torch.uint8, device=dev)
    masks = torch.randint(0, classes, (4 * B, src, src), device=dev)
    mean = torch.tensor([123.7, 116.3, 103.5], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4], device=dev).view(1, 3, 1, 1)
    loss_sum = torch.zeros((), device=dev)
    loop = Loop(args, dev, timer="events")
    for i in range(args.iters):
        loop.begin(i)
        idx = torch.randint(0, 4 * B, (B,), device=dev)
        oy, ox = (i * 7) % (src - crop + 1), (i * 13) % (src - crop + 1)
        x = images[idx, :, oy:oy + crop, ox:ox + crop].float()
        y = masks[idx, oy:oy + crop, ox:ox + crop]
        if i % 2:
            x, y = x.flip(-1), y.flip(-1)
        x = ((x - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_sum += loss.detach()
        loop.end(i)
    loop.report("unet_control", applied_fixes(args, control=True), "CUDA events before step 5 and before the end of the timed range")
    print("mean loss %.4f" % (loss_sum.item() / args.iters))


if __name__ == "__main__":
    main()
