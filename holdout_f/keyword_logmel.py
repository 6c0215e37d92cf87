"""Keyword-spotting training on log-mel spectrograms of 2-second 16 kHz clips.

The clips live in host memory as a numpy array (a stand-in for a decoded audio corpus);
each step samples 64 clips and their labels with a numpy RNG, computes 64-band log-mel
features (512-point Hann STFT, hop 160), and trains a VGG-style CNN (4 blocks of two 3x3
convs with BatchNorm) with bf16 autocast and fused AdamW. Timed with CUDA events.
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


import numpy as np

SR, N_FFT, HOP, N_MELS = 16000, 512, 160, 64


def mel_filterbank(sr=SR, n_fft=N_FFT, n_mels=N_MELS):
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    pts = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fb = np.zeros((n_mels, bins.size), dtype=np.float32)
    for m in range(n_mels):
        lo, c, hi = pts[m], pts[m + 1], pts[m + 2]
        fb[m] = np.clip(np.minimum((bins - lo) / (c - lo), (hi - bins) / (hi - c)), 0.0, None)
    return fb


def logmel_numpy(wav, window, fb):
    frames = np.lib.stride_tricks.sliding_window_view(wav, N_FFT, axis=-1)[:, ::HOP]  # (B, T, N_FFT)
    spec = np.fft.rfft(frames * window, axis=-1)
    power = spec.real ** 2 + spec.imag ** 2
    mel = power @ fb.T
    return np.log(mel + 1e-6).astype(np.float32).transpose(0, 2, 1)  # (B, n_mels, T)


def logmel_torch(wav, window, fb):
    spec = torch.stft(wav, N_FFT, hop_length=HOP, window=window, center=False, return_complex=True)
    power = spec.real ** 2 + spec.imag ** 2          # (B, freq, T)
    return torch.log(torch.matmul(fb, power) + 1e-6)  # (B, n_mels, T)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.MaxPool2d(2))


class KWSNet(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        w = width
        self.features = nn.Sequential(block(1, w), block(w, 2 * w), block(2 * w, 4 * w), block(4 * w, 4 * w))
        self.head = nn.Linear(4 * w, classes)

    def forward(self, x):
        x = (x - x.mean((1, 2), keepdim=True)) / (x.std((1, 2), keepdim=True) + 1e-5)
        h = self.features(x.unsqueeze(1))
        return self.head(h.mean((2, 3)))


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    B, CLIPS, SECONDS, WIDTH = (64, 1024, 2.0, 96) if cuda else (8, 32, 0.5, 8)
    CLASSES = 35
    rng = np.random.default_rng(0)
    n = int(SR * SECONDS)
    bank = (0.1 * rng.standard_normal((CLIPS, n))).astype(np.float32)
    bank += np.sin(np.arange(n, dtype=np.float32) * rng.uniform(0.01, 0.3, (CLIPS, 1))).astype(np.float32)
    labels_all = rng.integers(0, CLASSES, CLIPS)
    window_np = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
    fb_np = mel_filterbank()
    window, fb = torch.from_numpy(window_np).to(dev), torch.from_numpy(fb_np).to(dev)

    torch.manual_seed(0)
    model = KWSNet(WIDTH, CLASSES).to(dev)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if cuda else {}))
    loop = Loop(args, dev)
    total = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        idx = rng.integers(0, CLIPS, B)
        wav = bank[idx]
        y = torch.from_numpy(labels_all[idx]).to(dev)
        if args.fixed:
            feats = logmel_torch(torch.from_numpy(wav).to(dev), window, fb)
        else:
            feats = torch.from_numpy(logmel_numpy(wav, window_np, fb_np)).to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(feats), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        loop.end(i)
    loop.report("keyword_logmel", applied_fixes(args), "one training step per iteration")
    print("mean loss %.4f" % (total.item() / args.iters))


if __name__ == "__main__":
    main()
