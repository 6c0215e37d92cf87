"""Reptile meta-learning for 5-way few-shot image classification with a ResNet-12 learner.

Each meta-iteration samples 4 synthetic 5-way tasks (class prototypes drawn on the device,
images = prototype + noise, 32 x 32 as in CIFAR-FS), adapts a copy of the meta-model to every task with 5
inner SGD steps, and moves the meta-weights toward the mean of the adapted weights (Reptile
outer step). The learner is a ResNet-12 (4 residual stages of three 3x3 conv-BN-LeakyReLU,
64-160-320-640 channels). channels_last, bf16 autocast, CUDA events.
"""
import argparse, copy, json, sys, time
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

class ResBlock(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out)
        self.c2, self.b2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out)
        self.c3, self.b3 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out)
        self.skip = nn.Sequential(nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        h = F.leaky_relu(self.b1(self.c1(x)), 0.1)
        h = F.leaky_relu(self.b2(self.c2(h)), 0.1)
        h = self.b3(self.c3(h))
        return self.pool(F.leaky_relu(h + self.skip(x), 0.1))


class ResNet12(nn.Module):
    def __init__(self, ways, widths=(64, 160, 320, 640)):
        super().__init__()
        chans = (3,) + tuple(widths)
        self.stages = nn.Sequential(*[ResBlock(chans[i], chans[i + 1]) for i in range(4)])
        self.head = nn.Linear(widths[-1], ways)

    def forward(self, x):
        return self.head(self.stages(x).mean((2, 3)))


def task_stream(ways, shots, size, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    labels = torch.arange(ways, device=dev).repeat_interleave(shots)
    while True:
        protos = torch.randn(ways, 3, size, size, generator=g, device=dev)
        x = protos[labels] + 0.8 * torch.randn(ways * shots, 3, size, size, generator=g, device=dev)
        yield x.contiguous(memory_format=torch.channels_last), labels


class CopyLearner:
    """Adapted learner = a fresh deep copy of the meta-model for every task."""

    def __init__(self, meta):
        self.meta = meta

    def fresh(self):
        return copy.deepcopy(self.meta)


class BufferLearner:
    """Adapted learner = one preallocated model whose tensors are reloaded from the meta-model."""

    def __init__(self, meta):
        self.meta = meta
        self.model = copy.deepcopy(meta)
        self.dst = list(self.model.parameters()) + list(self.model.buffers())
        self.src = list(meta.parameters()) + list(meta.buffers())

    def fresh(self):
        with torch.no_grad():
            torch._foreach_copy_(self.dst, self.src)
        return self.model


def adapt(learner, x, y, inner_steps, inner_lr, amp_device):
    opt = torch.optim.SGD(learner.parameters(), lr=inner_lr)
    for _ in range(inner_steps):
        with torch.autocast(amp_device, dtype=torch.bfloat16):
            loss = F.cross_entropy(learner(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.detach()


def meta_step(meta, source, tasks, n_tasks, inner_steps, inner_lr, meta_lr, amp_device):
    meta_params = [p for p in meta.parameters()]
    acc = [torch.zeros_like(p) for p in meta_params]
    total = torch.zeros((), device=meta_params[0].device)
    for _ in range(n_tasks):
        x, y = next(tasks)
        learner = source.fresh()
        total += adapt(learner, x, y, inner_steps, inner_lr, amp_device)
        torch._foreach_add_(acc, list(learner.parameters()))
    with torch.no_grad():
        torch._foreach_mul_(acc, 1.0 / n_tasks)
        torch._foreach_sub_(acc, meta_params)
        torch._foreach_add_(meta_params, acc, alpha=meta_lr)
    return total / n_tasks


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        WAYS, SHOTS, SIZE, TASKS, INNER, WIDTHS = 5, 5, 32, 4, 5, (64, 160, 320, 640)
    else:
        WAYS, SHOTS, SIZE, TASKS, INNER, WIDTHS = 5, 2, 16, 2, 2, (8, 16, 16, 32)
    torch.manual_seed(0)
    meta = ResNet12(WAYS, WIDTHS).to(dev).to(memory_format=torch.channels_last)
    source = BufferLearner(meta) if args.fixed else CopyLearner(meta)
    tasks = task_stream(WAYS, SHOTS, SIZE, dev)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        total += meta_step(meta, source, tasks, TASKS, INNER, 0.05, 0.5, dev.type)
        loop.end(i)
    loop.report("reptile_fewshot", applied_fixes(args), "one meta-iteration (%d tasks x %d inner steps) per iteration" % (TASKS, INNER))
    print("mean inner loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
