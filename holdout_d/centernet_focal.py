"""CenterNet-style keypoint-heatmap detector training on synthetic scenes.

A small ResNet-like encoder with a stride-2 upsampling decoder predicts an 80-class
center heatmap plus box size and offset maps at 1/2 resolution of 256x256 images. The
heatmap loss is the penalty-reduced pixel-wise focal loss from the CenterNet paper,
box regression uses L1 at object centers. bf16 autocast, channels_last, fused Adam.
Gaussian target heatmaps are rendered once on the device.
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



def neg_focal_loss(logits, gt):
    pred = torch.sigmoid(logits.float()).clamp(1e-4, 1 - 1e-4)
    pos = gt.eq(1).float()
    neg = gt.lt(1).float()
    neg_weights = torch.pow(1 - gt, 4)
    pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos
    neg_loss = torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg
    num_pos = pos.sum()
    return -(pos_loss.sum() + neg_loss.sum()) / num_pos.clamp(min=1)


def cbr(cin, cout, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, s, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class CenterNet(nn.Module):
    def __init__(self, w, classes):
        super().__init__()
        self.enc = nn.Sequential(cbr(3, w, 2), cbr(w, w), cbr(w, 2 * w, 2), cbr(2 * w, 2 * w), cbr(2 * w, 4 * w, 2), cbr(4 * w, 4 * w))
        self.dec = nn.Sequential(nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1), nn.ReLU(inplace=True),
                                 nn.ConvTranspose2d(2 * w, w, 4, 2, 1), nn.ReLU(inplace=True))
        self.hm = nn.Conv2d(w, classes, 1)
        self.reg = nn.Conv2d(w, 4, 1)
        nn.init.constant_(self.hm.bias, -2.19)

    def forward(self, x):
        f = self.dec(self.enc(x))
        return self.hm(f), self.reg(f)


def render_targets(n, classes, R, objs, device):
    g = torch.Generator(device="cpu").manual_seed(0)
    hm = torch.zeros(n, classes, R, R)
    ys, xs = torch.meshgrid(torch.arange(R).float(), torch.arange(R).float(), indexing="ij")
    centers = torch.randint(4, R - 4, (n, objs, 2), generator=g)
    cls = torch.randint(0, classes, (n, objs), generator=g)
    sig = torch.rand(n, objs, generator=g) * 3 + 1
    for i in range(n):
        for j in range(objs):
            cy, cx = centers[i, j].tolist()
            gauss = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * sig[i, j] ** 2))
            hm[i, cls[i, j]] = torch.maximum(hm[i, cls[i, j]], gauss)
    boxes = torch.rand(n, objs, 4, generator=g) * 8
    return hm.to(device), centers.to(device), boxes.to(device)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, img, classes, w, objs = (64, 256, 80, 32, 12) if cuda else (2, 32, 8, 8, 3)
    R = img // 2
    torch.manual_seed(0)
    model = CenterNet(w, classes).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, fused=cuda)
    images = torch.randn(2 * B, 3, img, img, device=dev).contiguous(memory_format=torch.channels_last)
    hm_all, centers_all, boxes_all = render_targets(2 * B, classes, R, objs, dev)
    focal = torch.compile(neg_focal_loss) if args.fixed else neg_focal_loss
    loop = Loop(args, dev, timer="events")
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        sl = slice((i % 2) * B, (i % 2 + 1) * B)
        x, hm_gt, ctr, box = images[sl], hm_all[sl], centers_all[sl], boxes_all[sl]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            hm, reg = model(x)
        bidx = torch.arange(B, device=dev)[:, None].expand(-1, objs)
        pred_box = reg.float()[bidx, :, ctr[..., 0], ctr[..., 1]]
        loss = focal(hm, hm_gt) + 0.1 * F.l1_loss(pred_box, box)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        loop.end(i)
    loop.report("centernet_focal", applied_fixes(args), "CUDA events before step 5 and before the end of the timed range")
    print("mean loss %.4f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
