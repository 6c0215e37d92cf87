"""Knowledge distillation of a Transformer sequence classifier into a smaller student.

A 6 x 1024 teacher (frozen, eval mode, no_grad) and a 4 x 512 student read the same
synthetic token sequences, generated on the device each step. The student is trained on
a mix of the temperature-scaled KL divergence to the teacher's class distribution and the
cross-entropy to the labels. bf16 autocast for both models, fused AdamW, cosine LR
schedule; the loss is accumulated on the device and read once after training.
Timed with CUDA events.
"""
import argparse, json, sys, time, math
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


class Classifier(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads, classes):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        h = self.encoder(self.tok(ids) + self.pos)
        return self.head(self.norm(h).mean(1))


def distill_loss(s_logits, t_logits, labels, tau=2.0, mix=0.7):
    s, t = s_logits.float(), t_logits.float()
    kd = F.kl_div(F.log_softmax(s / tau, -1), F.log_softmax(t / tau, -1), reduction="batchmean",
                  log_target=True) * tau * tau
    return mix * kd + (1 - mix) * F.cross_entropy(s, labels)


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, S, V, C = 32, 256, 32000, 1000
        teacher_cfg, student_cfg = (1024, 6, 16), (512, 4, 8)
    else:
        B, S, V, C = 4, 16, 100, 10
        teacher_cfg, student_cfg = (32, 2, 2), (16, 1, 2)
    torch.manual_seed(0)
    teacher = Classifier(V, S, *teacher_cfg, C).to(dev).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = Classifier(V, S, *student_cfg, C).to(dev)
    kw = dict(lr=5e-4, weight_decay=0.05, betas=(0.9, 0.98))
    if cuda:
        kw["fused"] = True
    opt = torch.optim.AdamW(student.parameters(), **kw)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.iters) / max(1, args.iters))))
    # class-conditional unigram tables: labels are recoverable from the tokens
    table = torch.randint(0, V, (C, 64), device=dev)
    amp = dict(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        labels = torch.randint(0, C, (B,), device=dev)
        pick = torch.randint(0, 64, (B, S), device=dev)
        ids = torch.where(torch.rand(B, S, device=dev) < 0.5, table[labels[:, None], pick],
                          torch.randint(0, V, (B, S), device=dev))
        with torch.no_grad(), torch.autocast(**amp):
            t_logits = teacher(ids)
        with torch.autocast(**amp):
            s_logits = student(ids)
        loss = distill_loss(s_logits, t_logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        total += loss.detach()
        loop.end(i)
    loop.report("distill_control", applied_fixes(args, control=True), "one AdamW step of the student per batch")
    print("mean distillation loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
