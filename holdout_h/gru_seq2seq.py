"""GRU encoder-decoder with attention, trained on a synthetic transduction task.

A 2-layer bidirectional GRU encoder and a 2-layer GRU decoder (teacher forcing) with Luong
dot-product attention over the encoder states and an attentional output layer, as in the
classic NMT recipes. The task (reverse the source and map every token through a fixed
permutation) is generated on the device by a Python generator. fp32 with TF32, Adam, gradient
clipping, CUDA events.
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

def configure_backends(use_cudnn):
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.enabled = use_cudnn


def batches(batch, src_len, vocab, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    table = torch.randperm(vocab - 3, generator=g, device=dev) + 3      # 0 pad, 1 bos, 2 eos
    while True:
        src = torch.randint(3, vocab, (batch, src_len), generator=g, device=dev)
        tgt = table[src.flip(1) - 3]
        bos = torch.ones(batch, 1, dtype=torch.long, device=dev)
        yield src, torch.cat([bos, tgt[:, :-1]], 1), tgt


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hidden, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(emb, hidden // 2, layers, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(hidden, hidden)

    def forward(self, src):
        out, h = self.rnn(self.emb(src))                      # h: (layers*2, B, hidden/2)
        h = torch.cat([h[0::2], h[1::2]], dim=2)              # (layers, B, hidden)
        return out, torch.tanh(self.bridge(h)).contiguous()


class AttnDecoder(nn.Module):
    def __init__(self, vocab, emb, hidden, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.rnn = nn.GRU(emb, hidden, layers, batch_first=True)
        self.attn_out = nn.Linear(2 * hidden, hidden)
        self.proj = nn.Linear(hidden, vocab)

    def forward(self, tgt_in, enc_out, h0):
        dec, _ = self.rnn(self.emb(tgt_in), h0)               # (B, T, H)
        scores = torch.bmm(dec, enc_out.transpose(1, 2))      # (B, T, S)
        ctx = torch.bmm(scores.softmax(-1), enc_out)          # (B, T, H)
        att = torch.tanh(self.attn_out(torch.cat([dec, ctx], -1)))
        return self.proj(att)


class Seq2Seq(nn.Module):
    def __init__(self, vocab, emb, hidden, layers):
        super().__init__()
        self.encoder = Encoder(vocab, emb, hidden, layers)
        self.decoder = AttnDecoder(vocab, emb, hidden, layers)

    def forward(self, src, tgt_in):
        enc_out, h = self.encoder(src)
        return self.decoder(tgt_in, enc_out, h)


def train_step(model, opt, src, tgt_in, tgt_out):
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, S, V, EMB, HID, LAYERS = 128, 64, 8000, 512, 1024, 2
    else:
        B, S, V, EMB, HID, LAYERS = 4, 12, 64, 16, 32, 2
    configure_backends(use_cudnn=args.fixed)
    torch.manual_seed(0)
    model = Seq2Seq(V, EMB, HID, LAYERS).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **({"fused": True} if cuda else {}))
    data = batches(B, S, V, dev)
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i, (src, tgt_in, tgt_out) in zip(range(args.iters), data):
        loop.begin(i)
        total += train_step(model, opt, src, tgt_in, tgt_out)
        loop.end(i)
    loop.report("gru_seq2seq", applied_fixes(args), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
