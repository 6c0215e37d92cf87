"""Batch text-generation service for a GPT-style decoder (greedy decoding, static KV cache).

Each tick the service takes a batch of 8 prompts of 128 tokens, runs the prefill and 8
greedy decode steps with a preallocated KV cache, and keeps the generated tokens on the
device. The 8 x 4096 decoder (32 heads, 4x GELU MLP, untied output head, 32k vocabulary) is
built with float32 parameters and served in eval mode under torch.inference_mode() with
bfloat16 autocast; CUDA events time every tick.
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

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, cache, pos):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, D // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        kc, vc = cache
        kc[:, :, pos:pos + T] = k
        vc[:, :, pos:pos + T] = v
        y = F.scaled_dot_product_attention(q, kc[:, :, :pos + T], vc[:, :, :pos + T], is_causal=T > 1)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, cache, pos):
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, d, depth, heads, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, caches, pos):
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        for blk, cache in zip(self.blocks, caches):
            x = blk(x, cache, pos)
        return self.head(self.ln_f(x[:, -1:]))


def prepare_for_serving(model, dtype=None):
    model.eval().requires_grad_(False)
    if dtype is not None:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.to(dtype)
    return model


class Service:
    def __init__(self, model, batch, prompt_len, new_tokens, heads, d, depth, dev):
        self.model, self.new_tokens, self.prompt_len = model, new_tokens, prompt_len
        shape = (batch, heads, prompt_len + new_tokens, d // heads)
        self.caches = [(torch.zeros(shape, dtype=torch.bfloat16, device=dev),
                        torch.zeros(shape, dtype=torch.bfloat16, device=dev)) for _ in range(depth)]
        self.out = torch.zeros(batch, new_tokens, dtype=torch.long, device=dev)
        self.amp_device = dev.type

    def generate(self, prompts):
        with torch.inference_mode(), torch.autocast(self.amp_device, dtype=torch.bfloat16):
            logits = self.model(prompts, self.caches, 0)
            pos = self.prompt_len
            for t in range(self.new_tokens):
                nxt = logits[:, -1].argmax(-1)
                self.out[:, t] = nxt
                if t + 1 < self.new_tokens:
                    logits = self.model(nxt[:, None], self.caches, pos)
                    pos += 1
        return self.out


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda":
        V, D, DEPTH, HEADS, B, P, NEW = 32000, 4096, 8, 32, 8, 128, 8
    else:
        V, D, DEPTH, HEADS, B, P, NEW = 512, 64, 2, 4, 2, 16, 4
    torch.manual_seed(0)
    with torch.device(dev):
        model = GPT(V, D, DEPTH, HEADS, P + NEW)
    prepare_for_serving(model, torch.bfloat16 if args.fixed else None)
    svc = Service(model, B, P, NEW, HEADS, D, DEPTH, dev)
    g = torch.Generator(device=dev).manual_seed(1)
    loop = Loop(args, dev)
    checksum = torch.zeros((), dtype=torch.long, device=dev)
    for i in range(args.iters):
        loop.begin(i)
        prompts = torch.randint(0, V, (B, P), generator=g, device=dev)
        checksum += svc.generate(prompts).sum()
        loop.end(i)
    loop.report("gpt_serve_autocast", applied_fixes(args), "one request batch (prefill + %d decode steps) per iteration" % NEW)
    print("token checksum %d" % checksum.item())


if __name__ == "__main__":
    main()
