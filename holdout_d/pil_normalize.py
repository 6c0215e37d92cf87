"""ResNet-style classifier training on an in-memory image set with PIL augmentation.

Images are kept as PIL images; a torch DataLoader (persistent workers, pinned memory)
applies a random resized crop to 160x160 and a horizontal flip with PIL and returns
uint8 HWC batches. The training loop converts the batch to normalised float NCHW with
the ImageNet mean/std, then runs a bf16 channels_last ResNet step with SGD + Nesterov.
"""
import argparse, json, sys, time
import numpy as np
from PIL import Image
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



MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


class PILImages(torch.utils.data.Dataset):
    def __init__(self, n, src, out, seed=0):
        rng = np.random.default_rng(seed)
        self.imgs = [Image.fromarray(rng.integers(0, 256, (src, src, 3), dtype=np.uint8)) for _ in range(n)]
        self.labels = rng.integers(0, 1000, n)
        self.out = out

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = self.imgs[i % len(self.imgs)]
        w, h = img.size
        s = int(w * rng.uniform(0.5, 1.0))
        x0, y0 = rng.integers(0, w - s + 1), rng.integers(0, h - s + 1)
        img = img.resize((self.out, self.out), Image.BILINEAR, box=(x0, y0, x0 + s, y0 + s))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img).copy()), int(self.labels[i % len(self.labels)])


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def make_net(w):
    return nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
                         block(w, w, 1), block(w, 2 * w, 2), block(2 * w, 4 * w, 2), block(4 * w, 8 * w, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, 1000))


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, src, out, w, workers = (256, 256, 160, 64, 10) if cuda else (8, 48, 32, 8, 2)
    torch.manual_seed(0)
    ds = PILImages(512 if cuda else 32, src, out)
    dl = torch.utils.data.DataLoader(ds, batch_size=B, sampler=range(B * (args.iters + 1)), num_workers=workers,
                                     pin_memory=cuda, persistent_workers=True, prefetch_factor=4)
    net = make_net(w).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
    mean_d = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1)
    std_d = torch.tensor(STD, device=dev).view(1, 3, 1, 1)
    loop = Loop(args, dev, timer="events")
    it = iter(dl)
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        img, lab = next(it)
        if args.fixed:
            x = img.to(dev, non_blocking=True).permute(0, 3, 1, 2).float()
            x = ((x - mean_d) / std_d).contiguous(memory_format=torch.channels_last)
        else:
            arr = (img.numpy().astype(np.float32) - MEAN) / STD
            x = torch.from_numpy(arr.transpose(0, 3, 1, 2).copy()).to(dev).contiguous(memory_format=torch.channels_last)
        lab = lab.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(net(x), lab)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        loop.end(i)
    loop.report("pil_normalize", applied_fixes(args), "CUDA events before step 5 and before the end of the timed range")
    print("mean loss %.4f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
