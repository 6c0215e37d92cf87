"""Convolutional autoencoder trained with a small Lightning-style Trainer.

`AutoEncoderModule` defines training_step / configure_optimizers; the hand-rolled
`Trainer` runs the loop (gradient accumulation, bf16 autocast, gradient clipping) and
calls callback hooks: a cosine LR schedule, a sample counter, and a memory-cleanup
callback that returns cached GPU memory after every backward to keep the peak low.
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


class Callback:
    def on_fit_start(self, trainer, module): pass
    def on_train_batch_start(self, trainer, module, batch, step): pass
    def on_after_backward(self, trainer, module): pass
    def on_train_batch_end(self, trainer, module, loss, step): pass


class CosineLR(Callback):
    def __init__(self, base_lr, total):
        self.base_lr, self.total = base_lr, total

    def on_train_batch_start(self, trainer, module, batch, step):
        lr = 0.5 * self.base_lr * (1 + math.cos(math.pi * step / self.total))
        for g in trainer.optimizer.param_groups:
            g["lr"] = lr


class SampleCounter(Callback):
    def __init__(self):
        self.samples = 0

    def on_train_batch_start(self, trainer, module, batch, step):
        self.samples += sum(b.shape[0] for b in batch)


class MemoryCleanup(Callback):
    """Give cached blocks back to the driver so the next micro-batch starts from a clean pool."""

    def on_after_backward(self, trainer, module):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def on_train_batch_end(self, trainer, module, loss, step):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def conv_block(i, o, stride):
    return nn.Sequential(nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o), nn.SiLU(inplace=True))


def up_block(i, o):
    return nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(i, o, 3, 1, 1, bias=False),
                         nn.BatchNorm2d(o), nn.SiLU(inplace=True))


class AutoEncoderModule(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.enc = nn.Sequential(conv_block(3, w, 1), conv_block(w, w, 1), conv_block(w, 2 * w, 2),
                                 conv_block(2 * w, 2 * w, 1), conv_block(2 * w, 4 * w, 2), conv_block(4 * w, 4 * w, 1))
        self.dec = nn.Sequential(up_block(4 * w, 2 * w), conv_block(2 * w, 2 * w, 1), up_block(2 * w, w),
                                 conv_block(w, w, 1), nn.Conv2d(w, 3, 3, 1, 1))

    def forward(self, x):
        return self.dec(self.enc(x))

    def training_step(self, batch):
        (x,) = batch
        return F.mse_loss(self(x).float(), x.float())

    def configure_optimizers(self, lr):
        return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=1e-4, fused=torch.cuda.is_available())


class Trainer:
    def __init__(self, device, callbacks=(), accumulate=4, clip=1.0, precision="bf16"):
        self.device, self.callbacks = device, list(callbacks)
        self.accumulate, self.clip = accumulate, clip
        self.amp = precision == "bf16" and device.type == "cuda"
        self.optimizer = None

    def _call(self, hook, *a):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *a)

    def fit(self, module, batches, steps, lr, loop):
        module.to(self.device).to(memory_format=torch.channels_last).train()
        self.optimizer = module.configure_optimizers(lr)
        self._call("on_fit_start", module)
        for step in range(steps):
            loop.begin(step)
            micro = next(batches)
            self._call("on_train_batch_start", module, micro, step)
            self.optimizer.zero_grad(set_to_none=True)
            total = torch.zeros((), device=self.device)
            for mb in micro:
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
                    loss = module.training_step((mb,)) / self.accumulate
                loss.backward()
                total += loss.detach()
                self._call("on_after_backward", module)
            torch.nn.utils.clip_grad_norm_(module.parameters(), self.clip)
            self.optimizer.step()
            self._call("on_train_batch_end", module, total, step)
            loop.end(step)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, res, w, acc = (16, 128, 64, 4) if cuda else (2, 32, 8, 2)
    torch.manual_seed(0)
    pool = torch.rand(8, acc, B, 3, res, res, device=dev)
    pool = pool.to(memory_format=torch.channels_last) if pool.dim() == 4 else pool

    def batches():
        k = 0
        while True:
            yield [pool[k % 8, j].contiguous(memory_format=torch.channels_last) for j in range(acc)]
            k += 1

    callbacks = [CosineLR(2e-3, args.iters), SampleCounter()]
    if not args.fixed:
        callbacks.append(MemoryCleanup())
    trainer = Trainer(dev, callbacks, accumulate=acc)
    loop = Loop(args, dev, timer="events")
    trainer.fit(AutoEncoderModule(w), batches(), args.iters, 2e-3, loop)
    loop.report("lit_autoencoder", applied_fixes(args), "event before iteration 5 and before the end")


if __name__ == "__main__":
    main()
