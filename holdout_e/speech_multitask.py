"""Multi-task speech model training: frame-level phone classification + speaker ID.

Log-mel features (80 bins) go through a 2-layer strided Conv1d front end (4x time
reduction, padded frames masked to zero) and a 6-layer Transformer encoder with a key
padding mask. Two heads: a per-frame phone classifier and an utterance-level speaker
classifier over the masked mean of the encoder output. The loss of each utterance is
its mean frame cross-entropy plus its speaker cross-entropy, averaged over the batch.
Batches are drawn with a length-sorted sampler, so each batch has its own length.
cudnn autotuning, bf16 autocast, fused AdamW, CUDA events.
"""
import argparse, json, sys, time
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


FIXES = ("bucket", "batched_loss")


def conv_len(n):
    return (n - 1) // 2 + 1


def time_mask(lens, T, dev):
    return torch.arange(T, device=dev)[None, :] < lens[:, None]


class SpeechModel(nn.Module):
    def __init__(self, n_mels, d, layers, n_phones, n_speakers):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, d, 5, stride=2, padding=2)
        self.conv2 = nn.Conv1d(d, d, 5, stride=2, padding=2)
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.phone_head = nn.Linear(d, n_phones)
        self.speaker_head = nn.Linear(d, n_speakers)

    def forward(self, feats, lens1, lens2):
        # feats (B, n_mels, T); lens1/lens2: valid lengths after conv1/conv2 (device tensors)
        h = F.gelu(self.conv1(feats))
        h = h * time_mask(lens1, h.shape[-1], h.device)[:, None, :].to(h.dtype)
        h = F.gelu(self.conv2(h))
        m = time_mask(lens2, h.shape[-1], h.device)
        h = h * m[:, None, :].to(h.dtype)
        h = self.encoder(h.transpose(1, 2), src_key_padding_mask=~m)
        mf = m[:, :, None].to(h.dtype)
        pooled = (h * mf).sum(1) / lens2[:, None].to(h.dtype)
        return self.phone_head(h), self.speaker_head(pooled)


def loss_per_utterance(phone_logits, spk_logits, phones, speakers, frames):
    """Mean over utterances of (mean frame CE over the utterance's frames + speaker CE)."""
    total = 0.0
    for b, n in enumerate(frames):
        frame_ce = F.cross_entropy(phone_logits[b, :n].float(), phones[b, :n])
        spk_ce = F.cross_entropy(spk_logits[b:b + 1].float(), speakers[b:b + 1])
        total = total + frame_ce + spk_ce
    return total / len(frames)


def loss_batched(phone_logits, spk_logits, phones, speakers, lens2):
    B, T, P = phone_logits.shape
    ce = F.cross_entropy(phone_logits.float().reshape(B * T, P), phones[:, :T].reshape(B * T),
                         reduction="none").view(B, T)
    m = time_mask(lens2, T, ce.device)
    frame_ce = (ce * m).sum(1) / lens2
    spk_ce = F.cross_entropy(spk_logits.float(), speakers, reduction="none")
    return (frame_ce + spk_ce).mean()


class LengthSortedBatches:
    """Batches of similar-length utterances: each batch draws its own maximum length."""

    def __init__(self, batch, n_mels, t_min, t_max, n_phones, n_speakers, dev, seed=0):
        self.rng = np.random.default_rng(seed)
        self.B, self.M, self.t_min, self.t_max = batch, n_mels, t_min, t_max
        self.P, self.S, self.dev = n_phones, n_speakers, dev

    def next(self):
        tmax = int(self.rng.integers(self.t_min, self.t_max + 1))
        lens = np.sort(self.rng.integers(int(0.8 * tmax), tmax + 1, self.B))[::-1].copy()
        lens[0] = tmax
        feats = torch.randn(self.B, self.M, self.t_max, device=self.dev)
        phones = torch.randint(0, self.P, (self.B, conv_len(conv_len(self.t_max))), device=self.dev)
        speakers = torch.randint(0, self.S, (self.B,), device=self.dev)
        return feats, lens, phones, speakers


def pad_batch(feats, lens, T):
    # lens: device tensor of valid frame counts
    """Features padded (with zeros) to T frames, frames past each utterance's length zeroed."""
    x = feats[:, :, :T]
    return x * time_mask(lens, T, x.device)[:, None, :]


def main():
    args = make_parser(__doc__, FIXES).parse_args()
    fixes = applied_fixes(args, FIXES)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = True
    if cuda:
        B, M, D, L, t_min, t_max = 64, 80, 512, 6, 400, 1536
    else:
        B, M, D, L, t_min, t_max = 4, 16, 32, 1, 40, 120
    P, S, bucket = 64, 100, t_max // 6
    torch.manual_seed(0)
    model = SpeechModel(M, D, L, P, S).to(dev)
    kw = dict(lr=3e-4, weight_decay=0.01)
    if cuda:
        kw["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **kw)
    data = LengthSortedBatches(B, M, t_min, t_max, P, S, dev)

    def padded_len(tmax):
        if "bucket" in fixes:
            return -(-tmax // bucket) * bucket
        return tmax

    def step(feats, lens, phones, speakers, train=True):
        T = padded_len(int(lens[0]))
        lens0 = torch.as_tensor(lens).to(dev)
        x = pad_batch(feats, lens0, T)
        lens1 = conv_len(lens0)
        lens2 = conv_len(lens1)
        l2 = [conv_len(conv_len(int(n))) for n in lens]
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda):
            phone_logits, spk_logits = model(x, lens1, lens2)
        if "batched_loss" in fixes:
            loss = loss_batched(phone_logits, spk_logits, phones, speakers, lens2)
        else:
            loss = loss_per_utterance(phone_logits, spk_logits, phones, speakers, l2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if train:
            opt.step()
        else:
            opt.zero_grad(set_to_none=True)
        return loss.detach()

    if "bucket" in fixes:
        # one pass per bucket length before training, so every bucket is autotuned up front
        feats, _, phones, speakers = data.next()
        for T in range(bucket, t_max + 1, bucket):
            lens = np.full(B, T)
            step(feats, lens, phones, speakers, train=False)
        data = LengthSortedBatches(B, M, t_min, t_max, P, S, dev)
        torch.manual_seed(1)
    else:
        torch.manual_seed(1)

    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        total += step(*data.next())
        loop.end(i)
    loop.report("speech_multitask", fixes, "one AdamW step per batch")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
