"""ConvNeXt-T-style image classifier training on synthetic 224x224 images.

Stem (4x4 patchify conv + LayerNorm), four stages of ConvNeXt blocks (7x7 depthwise
conv, LayerNorm over channels, pointwise MLP as nn.Linear with GELU, layer scale,
residual), downsampling layers between stages. bf16 autocast, fused AdamW, label
smoothing; the image pool is generated on the device and sampled per step.
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



class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.full((d,), 1e-6))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, depths, dims, classes):
        super().__init__()
        layers = [nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6)]
        for s, (n, d) in enumerate(zip(depths, dims)):
            if s:
                layers += [LayerNorm2d(dims[s - 1], eps=1e-6), nn.Conv2d(dims[s - 1], d, 2, stride=2)]
            layers += [Block(d) for _ in range(n)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.norm(self.features(x).mean((2, 3))))


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, R, depths, dims = 128, 224, (3, 3, 9, 3), (96, 192, 384, 768)
    else:
        B, R, depths, dims = 4, 64, (1, 1, 2, 1), (16, 32, 48, 64)
    torch.manual_seed(0)
    fmt = torch.channels_last if args.fixed else torch.contiguous_format
    model = ConvNeXt(depths, dims, 1000).to(dev, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=cuda)
    pool = torch.randn(4 * B, 3, R, R, device=dev)
    labels = torch.randint(0, 1000, (4 * B,), device=dev)
    loop = Loop(args, dev, timer="events")
    losses = []
    for i in range(args.iters):
        loop.begin(i)
        idx = torch.randint(0, 4 * B, (B,), device=dev)
        x = pool[idx].contiguous(memory_format=fmt)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), labels[idx], label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        loop.end(i)
    loop.report("convnext_nchw", applied_fixes(args), "CUDA events before step 5 and before the end of the timed range")
    print("mean loss %.4f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
