"""Temporal convolutional network (TCN) for multivariate sensor forecasting.

Windows of 16-channel sensor recordings (1024 steps, stored as float16 in host memory) are
served by a torch DataLoader: a map-style dataset that returns a whole batch per index list
(BatchSampler as sampler), 4 persistent worker processes, pinned memory and prefetching.
The model is a causal TCN (8 residual blocks of two dilated 3-tap Conv1d, 128 channels,
dilations 1..128, GELU, weight norm free) predicting every channel's next value; it is
compiled with torch.compile (default mode) on the GPU. bf16 autocast, fused AdamW,
non_blocking host-to-device copies, CUDA events.
"""
import argparse, json, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

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

class SensorWindows(Dataset):
    def __init__(self, n_windows, channels, length, seed=0):
        rng = np.random.default_rng(seed)
        t = np.arange(length + 1, dtype=np.float32)
        freq = rng.uniform(0.005, 0.05, size=(n_windows, channels, 1)).astype(np.float32)
        phase = rng.uniform(0, 6.28, size=(n_windows, channels, 1)).astype(np.float32)
        self.bank = (np.sin(freq * t + phase) + 0.05 * rng.standard_normal((n_windows, channels, length + 1),
                                                                             dtype=np.float32)).astype(np.float16)

    def __len__(self):
        return len(self.bank)

    def __getitem__(self, idx):
        w = self.bank[np.sort(np.asarray(idx))]
        return torch.from_numpy(w[:, :, :-1]), torch.from_numpy(w[:, :, 1:])


class TemporalBlock(nn.Module):
    def __init__(self, ch, dilation):
        super().__init__()
        self.pad = 2 * dilation
        self.c1 = nn.Conv1d(ch, ch, 3, dilation=dilation)
        self.c2 = nn.Conv1d(ch, ch, 3, dilation=dilation)
        self.norm = nn.GroupNorm(1, ch)

    def forward(self, x):
        h = F.gelu(self.c1(F.pad(x, (self.pad, 0))))
        h = self.c2(F.pad(h, (self.pad, 0)))
        return F.gelu(self.norm(x + h))


class TCN(nn.Module):
    def __init__(self, c_in, ch, depth):
        super().__init__()
        self.inp = nn.Conv1d(c_in, ch, 1)
        self.blocks = nn.Sequential(*[TemporalBlock(ch, 2 ** i) for i in range(depth)])
        self.out = nn.Conv1d(ch, c_in, 1)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


def train_step(model, opt, x, y, amp_device):
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        pred = model(x)
    loss = F.mse_loss(pred.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        N_WIN, C_IN, LEN, CH, DEPTH, B, WORKERS = 8192, 16, 1024, 128, 8, 256, 4
    else:
        N_WIN, C_IN, LEN, CH, DEPTH, B, WORKERS = 256, 4, 128, 16, 3, 8, 2
    torch.manual_seed(0)
    ds = SensorWindows(N_WIN, C_IN, LEN)
    g = torch.Generator().manual_seed(1)
    sampler = BatchSampler(RandomSampler(ds, replacement=True, num_samples=10 ** 8, generator=g), B, drop_last=True)
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=WORKERS, pin_memory=cuda,
                        persistent_workers=True, prefetch_factor=4)
    model = TCN(C_IN, CH, DEPTH).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if cuda else model
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i, (x, y) in zip(range(args.iters), loader):
        loop.begin(i)
        x = x.to(dev, non_blocking=True).float()
        y = y.to(dev, non_blocking=True).float()
        total += train_step(step_model, opt, x, y, dev.type)
        loop.end(i)
    loop.report("tcn_forecast_control", applied_fixes(args, control=True), "one training step per iteration")
    print("mean loss %.5f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
