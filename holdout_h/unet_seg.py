"""U-Net semantic segmentation training with per-image IoU logging.

A 4-level U-Net (32-64-128-256-512 channels, two 3x3 conv-BN-ReLU per level, transposed-conv
upsampling, skip concatenation) is trained on synthetic 8-class scenes (random ellipses
and rectangles rendered on the device, with colour noise). Every step the trainer updates a
running confusion matrix and the per-image IoU shown in the progress log. bf16 autocast,
channels_last, AdamW, gradient-norm clipping, CUDA events.
"""
import argparse, json, sys, time
import numpy as np
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

FIXES = ("clip", "metric")


def conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
                         nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, n_classes, base=32):
        super().__init__()
        ch = [base * 2 ** i for i in range(5)]
        self.downs = nn.ModuleList([conv_block(3, ch[0])] + [conv_block(ch[i], ch[i + 1]) for i in range(4)])
        self.ups = nn.ModuleList(nn.ConvTranspose2d(ch[i + 1], ch[i], 2, stride=2) for i in reversed(range(4)))
        self.dec = nn.ModuleList(conv_block(2 * ch[i], ch[i]) for i in reversed(range(4)))
        self.head = nn.Conv2d(ch[0], n_classes, 1)

    def forward(self, x):
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        skips.pop()
        for up, dec in zip(self.ups, self.dec):
            x = dec(torch.cat([up(x), skips.pop()], 1))
        return self.head(x)


def scenes(batch, size, n_classes, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size, device=dev), torch.linspace(-1, 1, size, device=dev), indexing="ij")
    palette = torch.rand(n_classes, 3, generator=g, device=dev)
    while True:
        mask = torch.zeros(batch, size, size, dtype=torch.long, device=dev)
        for k in range(1, n_classes):
            c = torch.rand(batch, 4, 1, 1, generator=g, device=dev)
            cx, cy, rx, ry = c[:, 0] * 2 - 1, c[:, 1] * 2 - 1, 0.1 + 0.4 * c[:, 2], 0.1 + 0.4 * c[:, 3]
            shape = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 < 1 if k % 2 else \
                ((xx - cx).abs() < rx) & ((yy - cy).abs() < ry)
            mask = torch.where(shape, k, mask)
        img = palette[mask].permute(0, 3, 1, 2) + 0.3 * torch.randn(batch, 3, size, size, generator=g, device=dev)
        yield img.contiguous(memory_format=torch.channels_last), mask


def clip_by_global_norm(params, max_norm):
    total = torch.zeros((), device=params[0].device)
    for p in params:
        total = total + p.grad.detach().pow(2).sum()
    scale = (max_norm / (total.sqrt() + 1e-6)).clamp(max=1.0)
    for p in params:
        p.grad.detach().mul_(scale)


def clip_fused(params, max_norm):
    torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


class HostIoU:
    """Confusion matrix and per-image IoU in numpy."""

    def __init__(self, n_classes, dev):
        self.C = n_classes
        self.conf = np.zeros((n_classes, n_classes), dtype=np.int64)
        self.last_image_iou = 0.0

    def update(self, logits, mask):
        pred = logits.argmax(1).cpu().numpy()
        tgt = mask.cpu().numpy()
        ious = []
        for p, t in zip(pred, tgt):
            cm = np.bincount(t.reshape(-1) * self.C + p.reshape(-1), minlength=self.C * self.C).reshape(self.C, self.C)
            self.conf += cm
            inter, union = np.diag(cm), cm.sum(0) + cm.sum(1) - np.diag(cm)
            ious.append(np.mean(inter[union > 0] / union[union > 0]))
        self.last_image_iou = float(np.mean(ious))

    def confusion(self):
        return self.conf


class DeviceIoU:
    """Confusion matrix and per-image IoU accumulated on the device."""

    def __init__(self, n_classes, dev):
        self.C = n_classes
        self.conf = torch.zeros(n_classes * n_classes, dtype=torch.long, device=dev)
        self.last_image_iou = torch.zeros((), device=dev)

    def update(self, logits, mask):
        B = mask.shape[0]
        idx = (mask * self.C + logits.argmax(1)).view(B, -1)
        idx = idx + torch.arange(B, device=idx.device)[:, None] * self.C * self.C
        cm = torch.zeros(B * self.C * self.C, dtype=torch.long, device=idx.device)
        cm.scatter_add_(0, idx.flatten(), torch.ones_like(idx.flatten()))
        cm = cm.view(B, self.C, self.C)
        self.conf += cm.sum(0).flatten()
        inter = cm.diagonal(dim1=1, dim2=2)
        union = cm.sum(1) + cm.sum(2) - inter
        valid = union > 0
        iou = torch.where(valid, inter / union.clamp(min=1), 0.0).sum(1) / valid.sum(1)
        self.last_image_iou = iou.mean()

    def confusion(self):
        return self.conf.view(self.C, self.C).cpu().numpy()


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, SIZE, C, BASE = 16, 128, 8, 32
    else:
        B, SIZE, C, BASE = 2, 32, 4, 4
    torch.manual_seed(0)
    model = UNet(C, BASE).to(dev).to(memory_format=torch.channels_last)
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, **({"fused": True} if cuda else {}))
    clip = clip_fused if "clip" in fixes else clip_by_global_norm
    metric = (DeviceIoU if "metric" in fixes else HostIoU)(C, dev)
    data = scenes(B, SIZE, C, dev)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        img, mask = next(data)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(img)
        loss = F.cross_entropy(logits.float(), mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip(params, 1.0)
        opt.step()
        metric.update(logits.detach(), mask)
        total += loss.detach()
        loop.end(i)
    loop.report("unet_seg", fixes, "one training step per iteration")
    conf = metric.confusion()
    inter, union = np.diag(conf), conf.sum(0) + conf.sum(1) - np.diag(conf)
    print("mean loss %.4f  mIoU %.4f" % (total.item() / args.iters, float(np.mean(inter / np.maximum(union, 1)))))


if __name__ == "__main__":
    main()
