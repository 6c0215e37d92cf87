"""QuartzNet-style character CTC acoustic model trained with fp16 AMP.

Log-mel features (pre-extracted, held in memory as if read from a feature
cache) are normalised per utterance (CMVN) and augmented with SpecAugment
frequency/time masks, then fed to a stack of time-channel separable
convolution blocks (depthwise conv -> pointwise -> BatchNorm -> ReLU) with a
CTC head. Uses torch.amp autocast(float16) with a GradScaler.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXES = ("frontend", "layout")


class SubBlock(nn.Module):
    def __init__(self, ch, k, channels_last_time):
        super().__init__()
        self.btc = channels_last_time
        self.dw = nn.Conv1d(ch, ch, k, padding=k // 2, groups=ch, bias=False)
        self.pw = nn.Linear(ch, ch, bias=False)
        self.bn = nn.BatchNorm1d(ch)

    def forward(self, x):
        if self.btc:  # x: (B, T, C)
            x = self.dw(x.transpose(1, 2).contiguous()).transpose(1, 2).contiguous()
            x = self.pw(x)
            x = self.bn(x.transpose(1, 2).contiguous()).transpose(1, 2).contiguous()
        else:  # x: (B, C, T)
            x = self.dw(x)
            x = F.conv1d(x, self.pw.weight.unsqueeze(-1))
            x = self.bn(x)
        return F.relu(x)


class Block(nn.Module):
    def __init__(self, ch, k, repeat, btc):
        super().__init__()
        self.subs = nn.Sequential(*[SubBlock(ch, k, btc) for _ in range(repeat)])

    def forward(self, x):
        return F.relu(x + self.subs(x))


class QuartzNet(nn.Module):
    def __init__(self, n_mels, ch, n_blocks, repeat, k, vocab, btc):
        super().__init__()
        self.btc = btc
        self.stem = nn.Conv1d(n_mels, ch, 11, stride=2, padding=5, bias=False)
        self.stem_bn = nn.BatchNorm1d(ch)
        self.blocks = nn.Sequential(*[Block(ch, k, repeat, btc) for _ in range(n_blocks)])
        self.head = nn.Linear(ch, vocab)

    def forward(self, feats):  # feats: (B, T, n_mels) -> log-probs (T', B, vocab)
        x = F.relu(self.stem_bn(self.stem(feats.transpose(1, 2))))
        if self.btc:
            x = self.blocks(x.transpose(1, 2).contiguous())
            logits = self.head(x)
        else:
            x = self.blocks(x)
            logits = F.conv1d(x, self.head.weight.unsqueeze(-1), self.head.bias).transpose(1, 2)
        return logits.float().log_softmax(-1).transpose(0, 1)


def spec_augment_np(feats, rng, n_freq=2, f_width=15, n_time=2, t_width=40):
    feats = (feats - feats.mean(axis=1, keepdims=True)) / (feats.std(axis=1, keepdims=True) + 1e-5)
    b, t, f = feats.shape
    for i in range(b):
        for _ in range(n_freq):
            w = rng.integers(0, f_width + 1)
            s = rng.integers(0, f - w + 1)
            feats[i, :, s:s + w] = 0.0
        for _ in range(n_time):
            w = rng.integers(0, t_width + 1)
            s = rng.integers(0, t - w + 1)
            feats[i, s:s + w, :] = 0.0
    return feats


def spec_augment_torch(feats, n_freq=2, f_width=15, n_time=2, t_width=40):
    feats = (feats - feats.mean(1, keepdim=True)) / (feats.std(1, keepdim=True) + 1e-5)
    b, t, f = feats.shape
    dev = feats.device

    def band(size, n, width):
        w = torch.randint(0, width + 1, (b, n, 1), device=dev)
        s = (torch.rand(b, n, 1, device=dev) * (size - w + 1)).long()
        pos = torch.arange(size, device=dev).view(1, 1, size)
        return ((pos >= s) & (pos < s + w)).any(1)  # (b, size)

    mask = band(f, n_freq, f_width).unsqueeze(1) | band(t, n_time, t_width).unsqueeze(2)
    return feats.masked_fill(mask, 0.0)


def main():
    ap = argparse.ArgumentParser(description="QuartzNet CTC training")
    ap.add_argument("--fixed", action="store_true", help="apply every fix")
    ap.add_argument("--fix", action="append", default=[], choices=FIXES,
                    help="apply one fix (repeatable): " + ", ".join(FIXES))
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et")
    args = ap.parse_args()
    fixes = sorted(set(FIXES) if args.fixed else set(args.fix))

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if cuda:
        pool_n, batch, frames, n_mels, ch, n_blocks, repeat, k, tgt_len = 192, 32, 1000, 80, 1024, 6, 3, 15, 120
    else:
        pool_n, batch, frames, n_mels, ch, n_blocks, repeat, k, tgt_len = 16, 4, 96, 20, 32, 2, 2, 5, 12
    vocab = 32  # blank + 31 characters

    feat_pool = rng.standard_normal((pool_n, frames, n_mels), dtype=np.float32) * 2.0 - 4.0
    targets_pool = torch.randint(1, vocab, (pool_n, tgt_len), device=dev)
    out_frames = (frames + 2 * 5 - 11) // 2 + 1
    in_lens = (out_frames,) * batch
    tgt_lens = (tgt_len,) * batch

    on_device = "frontend" in fixes
    if on_device:
        feat_pool_dev = torch.from_numpy(feat_pool).to(dev)

    model = QuartzNet(n_mels, ch, n_blocks, repeat, k, vocab, btc="layout" not in fixes).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-3)
    scaler = torch.amp.GradScaler(dev.type, enabled=cuda)

    def next_batch():
        if on_device:
            idx = torch.randint(0, pool_n, (batch,), device=dev)
            return spec_augment_torch(feat_pool_dev[idx]), targets_pool[idx]
        idx = rng.integers(0, pool_n, batch)
        feats = spec_augment_np(feat_pool[idx], rng)
        return torch.from_numpy(feats).to(dev), targets_pool[torch.from_numpy(idx).to(dev)]

    def train_step():
        feats, tgt = next_batch()
        with torch.autocast(dev.type, dtype=torch.float16, enabled=cuda):
            log_probs = model(feats)
        loss = F.ctc_loss(log_probs, tgt, in_lens, tgt_lens, blank=0, zero_infinity=True)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    profiling = bool(args.trace or args.et)
    kk = min(args.trace_iters, args.iters)
    win = max(0, min(10, args.iters - kk)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    stamps = {}

    def stamp(i):
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            stamps[i] = e
        else:
            stamps[i] = time.perf_counter()

    losses = []
    for it in range(win):
        if it == 5:
            stamp(5)
        losses.append(train_step())
    if win > 5:
        stamp(win)
    if profiling:
        et = None
        if args.et:
            et = torch.profiler.ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            for it in range(win, win + kk):
                losses.append(train_step())
        if args.trace:
            prof.export_chrome_trace(args.trace)
        if et is not None:
            et.stop()
            et.unregister_callback()
        for it in range(win + kk, args.iters):
            losses.append(train_step())
    if cuda:
        torch.cuda.synchronize()

    iter_ms = None
    if win > 5:
        a, b = stamps[5], stamps[win]
        iter_ms = (a.elapsed_time(b) if cuda else (b - a) * 1e3) / (win - 5)
    print(f"speech_ctc: batch {batch}x{frames} frames, final CTC loss {losses[-1].item():.3f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "speech_ctc",
        "fixes": fixes,
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": ("CUDA events" if cuda else "perf_counter") + f" recorded before iterations 5 and {win}",
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
