"""Two-layer LSTM sequence tagger (token -> tag), trained with Adam on random data.

The recurrence is unrolled by hand with nn.LSTMCell, one time step at a time.

    python lstm_tagger.py            # python loop over time steps with nn.LSTMCell
    python lstm_tagger.py --fixed    # the same LSTM as one nn.LSTM call (cuDNN)
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile


class Tagger(nn.Module):
    def __init__(self, vocab, n_tags, emb, hidden, layers, fused):
        super().__init__()
        self.fused = fused
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, emb)
        if fused:
            self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True)
        else:
            self.cells = nn.ModuleList(nn.LSTMCell(emb if i == 0 else hidden, hidden) for i in range(layers))
        self.out = nn.Linear(hidden, n_tags)

    def forward(self, tokens):
        x = self.embed(tokens)  # [B, T, E]
        if self.fused:
            h, _ = self.lstm(x)
            return self.out(h)
        b, t, _ = x.shape
        state = [(x.new_zeros(b, self.hidden), x.new_zeros(b, self.hidden)) for _ in self.cells]
        outputs = []
        for step in range(t):
            inp = x[:, step]
            for li, cell in enumerate(self.cells):
                state[li] = cell(inp, state[li])
                inp = state[li][0]
            outputs.append(inp)
        return self.out(torch.stack(outputs, dim=1))


parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--fixed", action="store_true", help="use nn.LSTM (cuDNN) instead of the LSTMCell loop")
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--trace", default=None)
parser.add_argument("--trace-iters", type=int, default=5)
parser.add_argument("--et", default=None)
args = parser.parse_args()

dev = args.device
gpu = dev.startswith("cuda")
torch.manual_seed(0)
VOCAB, TAGS, EMB, HID, LAYERS = (20000, 48, 256, 512, 2) if gpu else (500, 8, 32, 32, 2)
BATCH, SEQ = (64, 128) if gpu else (4, 16)

model = Tagger(VOCAB, TAGS, EMB, HID, LAYERS, fused=args.fixed).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
tokens = torch.randint(0, VOCAB, (4, BATCH, SEQ), device=dev)
tags = torch.randint(0, TAGS, (4, BATCH, SEQ), device=dev)


def step(i):
    logits = model(tokens[i % 4])
    loss = F.cross_entropy(logits.reshape(-1, TAGS), tags[i % 4].reshape(-1))
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    return loss


def cuda_sync():
    if gpu:
        torch.cuda.synchronize()


K = min(args.trace_iters, args.iters)
want = bool(args.trace or args.et)
START = 10 if args.iters >= 10 + K else max(0, args.iters - K)

elapsed, counted = 0.0, 0
i = 0
loss = None
while i < args.iters:
    if want and i == START:
        et = None
        if args.et:
            et = ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU],
                     record_shapes=True, with_stack=True) as prof:
            for _ in range(K):
                loss = step(i)
                i += 1
        if et is not None:
            et.stop()
            et.unregister_callback()
        if args.trace:
            prof.export_chrome_trace(args.trace)
        continue
    # a run of consecutive unprofiled iterations, timed as one block (after the first five)
    stop = START if (want and i < START) else args.iters
    if i < 5:
        stop = min(stop, 5)
    timed = i >= 5 and not (want and i >= START)  # nothing after the profiled window is timed
    if timed:
        cuda_sync()
        t0 = time.perf_counter()
    n = 0
    while i < stop:
        loss = step(i)
        i += 1
        n += 1
    if timed:
        cuda_sync()
        elapsed += time.perf_counter() - t0
        counted += n

iter_ms = 1e3 * elapsed / max(counted, 1)
print(f"LSTM tagger ({'nn.LSTM' if args.fixed else 'LSTMCell loop'}): {iter_ms:.2f} ms/step, "
      f"{BATCH * SEQ / iter_ms * 1e3:.0f} tokens/s, loss {loss.item():.4f}")
print("HOLDOUT_RESULT " + json.dumps({"program": "lstm_tagger", "fixes": ["all"] if args.fixed else [],
                                      "iters": args.iters, "iter_ms": iter_ms,
                                      "timing": "wall clock per block of steps, cuda synchronize at both ends, mean"}),
      file=sys.stderr)
