"""Click-through-rate MLP trained on a tabular feature matrix held in host memory.

Configured through a dataclass whose fields become command-line flags. Each step
samples a batch of rows from the numpy feature matrix, standardises it on the host,
uploads it through pinned memory, and runs a wide bf16 MLP with AdamW. Training
curves (loss, accuracy) are logged every step.
"""
import argparse, dataclasses, json, sys, time
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


@dataclasses.dataclass
class Config:
    rows: int = 200_000
    features: int = 512
    width: int = 6144
    depth: int = 3
    batch: int = 8192
    lr: float = 3e-4
    weight_decay: float = 0.01

    @classmethod
    def small(cls):
        return cls(rows=4096, features=64, width=256, depth=2, batch=256)


def build_mlp(cfg):
    layers, d = [], cfg.features
    for _ in range(cfg.depth):
        layers += [nn.Linear(d, cfg.width), nn.ReLU()]
        d = cfg.width
    layers.append(nn.Linear(d, 1))
    return nn.Sequential(*layers)


def main():
    parser = make_parser(__doc__)
    for f in dataclasses.fields(Config):
        parser.add_argument("--" + f.name.replace("_", "-"), type=f.type if callable(f.type) else eval(f.type), default=None)
    args = parser.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    cfg = Config() if cuda else Config.small()
    cfg = dataclasses.replace(cfg, **{f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
                                      if getattr(args, f.name) is not None})
    rng = np.random.default_rng(0)
    X = rng.standard_normal((cfg.rows, cfg.features), dtype=np.float32) * 3 + 1
    w_true = rng.standard_normal(cfg.features).astype(np.float32)
    Y = (X @ w_true > 0).astype(np.float32)
    mu, sd = X.mean(0), X.std(0) + 1e-6

    torch.manual_seed(0)
    model = build_mlp(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=cuda)
    history = {"loss": [], "acc": []}
    loss_sum = torch.zeros((), device=dev)
    correct = torch.zeros((), device=dev)
    loop = Loop(args, dev, timer="wall")
    for i in range(args.iters):
        loop.begin(i)
        idx = rng.integers(0, cfg.rows, cfg.batch)
        xb = (X[idx] - mu) / sd
        yb = Y[idx]
        x = torch.from_numpy(xb)
        y = torch.from_numpy(yb)
        if cuda:
            x, y = x.pin_memory(), y.pin_memory()
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = ((logits > 0) == (y > 0.5)).float().mean()
        if args.fixed:
            loss_sum += loss.detach()
            correct += acc.detach()
        else:
            history["loss"].append(loss.item())
            history["acc"].append(acc.item())
        loop.end(i)
    loop.report("tabular_sync", applied_fixes(args), "wall clock around iterations")
    if args.fixed:
        history["loss"].append(loss_sum.item() / args.iters)
    print("final loss %.4f" % history["loss"][-1])


if __name__ == "__main__":
    main()
