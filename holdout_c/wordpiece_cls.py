"""Sentence classification with a small Transformer encoder and a WordPiece tokenizer.

The tokenizer is a from-scratch greedy longest-match-first WordPiece (basic
whitespace/punctuation split, lower-casing, '##' continuation pieces) over a
vocabulary built from the corpus. Each training step takes the next batch of raw
sentences, encodes them, pads to the longest sequence, and runs one AdamW step.
"""
import argparse, json, random, sys, time
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

PUNCT = set(".,;:!?()'\"-")


class WordPiece:
    def __init__(self, vocab):
        self.vocab = {w: i for i, w in enumerate(vocab)}
        self.unk, self.pad, self.cls = self.vocab["[UNK]"], self.vocab["[PAD]"], self.vocab["[CLS]"]
        self.max_chars = 100

    def basic_split(self, text):
        out, cur = [], []
        for ch in text.lower():
            if ch.isspace():
                if cur:
                    out.append("".join(cur)); cur = []
            elif ch in PUNCT:
                if cur:
                    out.append("".join(cur)); cur = []
                out.append(ch)
            else:
                cur.append(ch)
        if cur:
            out.append("".join(cur))
        return out

    def word_pieces(self, word):
        if len(word) > self.max_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end, piece = len(word), None
            while start < end:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.vocab:
                    piece = self.vocab[sub]
                    break
                end -= 1
            if piece is None:
                return [self.unk]
            ids.append(piece)
            start = end
        return ids

    def encode(self, text, max_len):
        ids = [self.cls]
        for w in self.basic_split(text):
            ids.extend(self.word_pieces(w))
        return ids[:max_len]

    def batch_encode(self, texts, max_len):
        rows = [self.encode(t, max_len) for t in texts]
        longest = max(len(r) for r in rows)
        ids = [r + [self.pad] * (longest - len(r)) for r in rows]
        return torch.tensor(ids), torch.tensor([[1] * len(r) + [0] * (longest - len(r)) for r in rows])


def make_corpus(n, words_per, seed=0):
    rnd = random.Random(seed)
    syl = ["ka", "ri", "to", "men", "sul", "pra", "dio", "vek", "lo", "ne", "ast", "quo", "bri", "tel"]
    stems = ["".join(rnd.choice(syl) for _ in range(rnd.randint(1, 3))) for _ in range(3000)]
    suffixes = ["", "", "s", "ing", "ed", "ly", "ness", "ation"]
    texts, labels = [], []
    for _ in range(n):
        ws = [rnd.choice(stems) + rnd.choice(suffixes) for _ in range(words_per)]
        for k in range(0, words_per, 9):
            ws[k] = ws[k].capitalize() + rnd.choice([",", ".", "", "!"])
        texts.append(" ".join(ws))
        labels.append(sum(len(w) for w in ws) % 4)
    vocab = ["[PAD]", "[UNK]", "[CLS]"] + sorted(PUNCT) + sorted(set(stems)) + \
        sorted({"##" + s for s in syl + ["s", "ing", "ed", "ly", "ness", "ation"]})
    return texts, labels, vocab


class Classifier(nn.Module):
    def __init__(self, vocab, d, layers, heads, classes=4, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.enc(self.tok(ids) + self.pos(pos), src_key_padding_mask=mask == 0)
        return self.head(h[:, 0])


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    batch, words, max_len = (64, 60, 192) if cuda else (8, 60, 192)
    d, layers = (768, 6) if cuda else (64, 2)
    texts, labels, vocab = make_corpus(batch * 16, words)
    tok = WordPiece(vocab)
    torch.manual_seed(0)
    model = Classifier(len(vocab), d, layers, d // 64).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=cuda)
    nb = len(texts) // batch
    y_all = torch.tensor(labels, device=dev)
    if args.fixed:
        # encode the corpus once, keep the padded ids on the device
        ids_all, mask_all = tok.batch_encode(texts, max_len)
        ids_all, mask_all = ids_all.to(dev), mask_all.to(dev)
    loop = Loop(args, dev, timer="events")
    model.train()
    for i in range(args.iters):
        loop.begin(i)
        b = i % nb
        sl = slice(b * batch, (b + 1) * batch)
        if args.fixed:
            ids, mask = ids_all[sl], mask_all[sl]
        else:
            ids, mask = tok.batch_encode(texts[sl], max_len)
            ids, mask = ids.to(dev, non_blocking=True), mask.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(ids, mask)
        loss = F.cross_entropy(logits.float(), y_all[sl])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loop.end(i)
    loop.report("wordpiece_cls", applied_fixes(args), "event before iteration 5 and before the end")


if __name__ == "__main__":
    main()
