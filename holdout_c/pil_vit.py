"""ViT image classifier trained from an in-memory image bank through a torch DataLoader.

Samples are decoded to PIL images and augmented with torchvision transforms
(RandomResizedCrop, horizontal flip, ToTensor, Normalize). Optional automatic mixed
precision (fp16 autocast + GradScaler). The running loss is printed every 10 steps.
"""
import argparse, json, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
import torchvision
from torchvision import transforms as T


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

FIXES = ("loader", "precision")


class ImageBank(torch.utils.data.Dataset):
    def __init__(self, n, res, crop, seed=0):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, (n, res, res, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 100, n)
        self.tf = T.Compose([T.RandomResizedCrop(crop, scale=(0.35, 1.0), antialias=True),
                             T.RandomHorizontalFlip(),
                             T.ToTensor(),
                             T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        img = Image.fromarray(self.images[i])
        return self.tf(img), int(self.labels[i])


def endless(loader):
    while True:
        for b in loader:
            yield b


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        n, res, crop, batch, workers = 4096, 72, 64, 192, 10
        vit = dict(image_size=64, patch_size=8, num_layers=6, num_heads=8, hidden_dim=512, mlp_dim=2048)
    else:
        n, res, crop, batch, workers = 256, 40, 32, 16, 2
        vit = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128)
    amp = "precision" in fixes and cuda
    ds = ImageBank(n, res, crop)
    if "loader" in fixes:
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True,
                                             num_workers=workers, pin_memory=cuda,
                                             persistent_workers=True, prefetch_factor=4)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True)
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(num_classes=100, **vit).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    data = endless(loader)
    running = 0.0
    loop = Loop(args, dev, timer="events")
    model.train()
    for i in range(args.iters):
        loop.begin(i)
        x, y = next(data)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        running += loss.item()
        if (i + 1) % 10 == 0:
            print("step %d loss %.4f" % (i + 1, running / 10))
            running = 0.0
        loop.end(i)
    loop.report("pil_vit", fixes, "event before iteration 5 and before the end")


if __name__ == "__main__":
    main()
