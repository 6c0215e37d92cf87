"""SASRec sequential recommendation: a causal Transformer over users' item histories.

A class-based Trainer with callbacks trains SASRec (item embedding shared with the output
layer, learned positions, 4 causal pre-norm blocks of width 512) with full-softmax next-item
prediction over a 100k-item catalogue. The user log is loaded into host memory as JSON-like
records (kept for evaluation-time filtering); training sequences are drawn on the device.
Callbacks: a best-weights keeper (restore the best smoothed-loss weights at the end, as in
early stopping), a memory-hygiene callback, and a loss logger. bf16 autocast, fused AdamW,
CUDA events.
"""
import argparse, gc, json, sys, time
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

FIXES = ("snapshot", "gc")


class SASRec(nn.Module):
    def __init__(self, n_items, d, depth, heads, max_len):
        super().__init__()
        self.item = nn.Embedding(n_items, d)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        nn.init.normal_(self.item.weight, std=0.02)

    def forward(self, seq):
        T = seq.shape[1]
        x = self.item(seq) + self.pos.weight[:T]
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=seq.device)
        h = self.ln(self.encoder(x, mask=mask, is_causal=True))
        return F.linear(h, self.item.weight)


def load_user_log(n_users, n_items, seed=0):
    import random
    rng = random.Random(seed)
    log = []
    for u in range(n_users):
        hist = [rng.randrange(n_items) for _ in range(rng.randrange(5, 25))]
        log.append({"user_id": u, "history": hist, "meta": {"country": rng.choice("ABCDEFGH"), "ts": [u, u + 1]}})
    return log


def sample_sequences(batch, length, n_items, gen, dev):
    start = torch.randint(0, n_items, (batch, 1), generator=gen, device=dev)
    stride = torch.randint(1, 9, (batch, 1), generator=gen, device=dev)
    noise = (torch.rand(batch, length + 1, generator=gen, device=dev) < 0.1).long() * 17
    seq = (start + stride * torch.arange(length + 1, device=dev) + noise) % n_items
    return seq[:, :-1], seq[:, 1:]


class Callback:
    def on_fit_start(self, trainer): pass
    def on_step_end(self, trainer, step, loss): pass
    def on_fit_end(self, trainer): pass


class LossLogger(Callback):
    def __init__(self):
        self.total = None

    def on_step_end(self, trainer, step, loss):
        self.total = loss if self.total is None else self.total + loss


class BestWeights(Callback):
    """Keeps the weights with the lowest smoothed training loss (copied to host memory)."""

    def __init__(self, beta=0.9):
        self.beta, self.smoothed, self.best, self.state, self.best_step = beta, None, float("inf"), None, -1

    def improved(self, loss):
        v = loss.item()
        self.smoothed = v if self.smoothed is None else self.beta * self.smoothed + (1 - self.beta) * v
        return self.smoothed < self.best

    def on_step_end(self, trainer, step, loss):
        if self.improved(loss):
            self.best, self.best_step = self.smoothed, step
            self.state = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}

    def on_fit_end(self, trainer):
        trainer.best_state = self.state


class BestWeightsOnDevice(BestWeights):
    """Same policy; the best weights are kept in device buffers and copied to host once."""

    def on_fit_start(self, trainer):
        sd = trainer.model.state_dict()
        self.keys = list(sd)
        self.buffers = [torch.empty_like(v) for v in sd.values()]

    def on_step_end(self, trainer, step, loss):
        if self.improved(loss):
            self.best, self.best_step = self.smoothed, step
            with torch.no_grad():
                torch._foreach_copy_(self.buffers, [v.detach() for v in trainer.model.state_dict().values()])

    def on_fit_end(self, trainer):
        self.state = {k: b.cpu() for k, b in zip(self.keys, self.buffers)} if self.best_step >= 0 else None
        trainer.best_state = self.state


class MemoryHygiene(Callback):
    def on_step_end(self, trainer, step, loss):
        gc.collect()


class Trainer:
    def __init__(self, model, opt, callbacks, loop, amp_device):
        self.model, self.opt, self.callbacks, self.loop, self.amp_device = model, opt, callbacks, loop, amp_device
        self.best_state = None

    def training_step(self, seq, target):
        with torch.autocast(self.amp_device, dtype=torch.bfloat16):
            logits = self.model(seq)
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def fit(self, batches, steps):
        for cb in self.callbacks:
            cb.on_fit_start(self)
        for step in range(steps):
            self.loop.begin(step)
            seq, target = next(batches)
            loss = self.training_step(seq, target)
            for cb in self.callbacks:
                cb.on_step_end(self, step, loss)
            self.loop.end(step)
        for cb in self.callbacks:
            cb.on_fit_end(self)


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        N_ITEMS, D, DEPTH, HEADS, B, L, N_USERS = 100_000, 512, 4, 8, 128, 100, 50_000
    else:
        N_ITEMS, D, DEPTH, HEADS, B, L, N_USERS = 2_000, 32, 2, 4, 4, 16, 20_000
    user_log = load_user_log(N_USERS, N_ITEMS)
    torch.manual_seed(0)
    model = SASRec(N_ITEMS, D, DEPTH, HEADS, L).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, **({"fused": True} if cuda else {}))
    gen = torch.Generator(device=dev).manual_seed(1)

    def batches():
        while True:
            yield sample_sequences(B, L, N_ITEMS, gen, dev)

    logger = LossLogger()
    keeper = BestWeightsOnDevice() if "snapshot" in fixes else BestWeights()
    callbacks = [logger, keeper] + ([] if "gc" in fixes else [MemoryHygiene()])
    loop = Loop(args, dev)
    trainer = Trainer(model, opt, callbacks, loop, dev.type)
    trainer.fit(batches(), args.iters)
    loop.report("sasrec_trainer", fixes, "one training step per iteration")
    best = trainer.best_state
    print("mean loss %.4f  best smoothed %.4f at step %d  best-weights checksum %.4f  (%d users in log)" % (
        logger.total.item() / args.iters, keeper.best, keeper.best_step,
        float(best["item.weight"].double().abs().sum()), len(user_log)))


if __name__ == "__main__":
    main()
