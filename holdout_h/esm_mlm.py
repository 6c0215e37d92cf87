"""ESM-style protein language model: masked-token pre-training of a BERT-like encoder.

Synthetic protein sequences over the 20 standard amino acids (plus special tokens) are
generated on the device; 15% of the residues are selected for prediction (80% <mask>, 10%
random, 10% kept). The encoder is pre-LayerNorm with rotary position embeddings in the
attention (12 x 768, 12 heads, GELU MLP) and a tied LM head. bf16 autocast, fused AdamW,
linear warm-up; the runtime is configured once at start-up; CUDA events.
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

PAD, CLS, EOS, MASK, FIRST_AA, VOCAB = 0, 1, 2, 3, 4, 33


def configure_runtime(dev, reference_kernels):
    torch.backends.cuda.matmul.allow_tf32 = True
    if dev.type == "cuda" and reference_kernels:
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)


def rotary_tables(seq, dim, dev):
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=dev).float() / dim))
    f = torch.outer(torch.arange(seq, device=dev).float(), inv)
    return f.cos().repeat(1, 2), f.sin().repeat(1, 2)


def apply_rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class EncoderLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ProteinLM(nn.Module):
    def __init__(self, d, depth, heads):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.layers = nn.ModuleList(EncoderLayer(d, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(d)
        self.lm_dense, self.lm_ln = nn.Linear(d, d), nn.LayerNorm(d)
        self.lm_bias = nn.Parameter(torch.zeros(VOCAB))
        self.head_dim = d // heads
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids):
        cos, sin = rotary_tables(ids.shape[1], self.head_dim, ids.device)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        h = self.lm_ln(F.gelu(self.lm_dense(self.ln_f(x))))
        return F.linear(h, self.embed.weight, self.lm_bias)


def make_batch(B, S, gen, dev):
    seq = torch.randint(FIRST_AA, FIRST_AA + 20, (B, S), generator=gen, device=dev)
    seq[:, 0], seq[:, -1] = CLS, EOS
    r = torch.rand(B, S, generator=gen, device=dev)
    sel = (r < 0.15) & (seq >= FIRST_AA)
    u = torch.rand(B, S, generator=gen, device=dev)
    rnd = torch.randint(FIRST_AA, FIRST_AA + 20, (B, S), generator=gen, device=dev)
    ids = torch.where(sel & (u < 0.8), torch.full_like(seq, MASK), seq)
    ids = torch.where(sel & (u >= 0.8) & (u < 0.9), rnd, ids)
    labels = torch.where(sel, seq, torch.full_like(seq, -100))
    return ids, labels


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, S, D, DEPTH, HEADS = 16, 1024, 768, 12, 12
    else:
        B, S, D, DEPTH, HEADS = 2, 32, 64, 2, 4
    configure_runtime(dev, reference_kernels=not args.fixed)
    torch.manual_seed(0)
    model = ProteinLM(D, DEPTH, HEADS).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=0.01, **({"fused": True} if cuda else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    gen = torch.Generator(device=dev).manual_seed(1)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        ids, labels = make_batch(B, S, gen, dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(ids)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        total += loss.detach()
        loop.end(i)
    loop.report("esm_mlm", applied_fixes(args), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
