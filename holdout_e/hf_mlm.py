"""BERT-style masked-language-model pre-training with Hugging-Face-style model classes.

A config dataclass, a PreTrainedModel-like base class with weight init, BertForMaskedLM
returning a MaskedLMOutput(loss, logits); labels use -100 for unmasked positions.
Synthetic token batches with 15% masking, bf16 autocast, fused AdamW, CUDA events.
"""
import argparse, json, sys, time
from dataclasses import dataclass
from typing import Optional
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


@dataclass
class BertConfig:
    vocab_size: int = 50304
    hidden_size: int = 768
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02


@dataclass
class MaskedLMOutput:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None


class BertPreTrainedModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config

    def _init_weights(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(0.0, self.config.initializer_range)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()

    def post_init(self):
        self.apply(self._init_weights)


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h = c.num_attention_heads
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size)
        self.o = nn.Linear(c.hidden_size, c.hidden_size)
        self.ln1 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size)
        self.ln2 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x):
        B, S, E = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.h, E // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, E)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BertForMaskedLM(BertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        c = config
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.emb_ln = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.num_hidden_layers))
        self.transform = nn.Linear(c.hidden_size, c.hidden_size)
        self.transform_ln = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.decoder = nn.Linear(c.hidden_size, c.vocab_size)
        self.post_init()
        self.decoder.weight = self.word_embeddings.weight

    def forward(self, input_ids, labels=None, masked_positions=None):
        S = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.position_embeddings.weight[:S]
        x = self.emb_ln(x)
        for layer in self.layers:
            x = layer(x)
        if masked_positions is not None:
            idx = masked_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1])
            x = x.gather(1, idx)
            labels = labels.gather(1, masked_positions) if labels is not None else None
        logits = self.decoder(self.transform_ln(F.gelu(self.transform(x))))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.config.vocab_size), labels.reshape(-1), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)


def mask_tokens(ids, n_mask, mask_id):
    """Masks exactly n_mask random positions per sequence; labels are -100 elsewhere."""
    pos = torch.rand(ids.shape, device=ids.device).argsort(-1)[:, :n_mask]
    labels = torch.full_like(ids, -100).scatter_(1, pos, ids.gather(1, pos))
    inputs = ids.scatter(1, pos, mask_id)
    return inputs, labels, pos


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    if cuda:
        cfg, B, S = BertConfig(), 32, 512
    else:
        cfg, B, S = BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, max_position_embeddings=32), 4, 32
    model = BertForMaskedLM(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    n_mask = int(0.15 * S)
    loop = Loop(args, dev)
    tot = torch.zeros((), device=dev)
    for i in range(args.iters):
        loop.begin(i)
        ids = torch.randint(5, cfg.vocab_size, (B, S), device=dev)
        inputs, labels, pos = mask_tokens(ids, n_mask, mask_id=4)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            out = model(inputs, labels=labels, masked_positions=pos if args.fixed else None)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        tot += out.loss.detach()
        loop.end(i)
    loop.report("hf_mlm", applied_fixes(args), "one AdamW step per batch")
    print("mean loss %.4f" % (tot.item() / args.iters))


if __name__ == "__main__":
    main()
