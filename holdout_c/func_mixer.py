"""MLP-Mixer language-ish model trained in a functional (JAX-like) style with torch.func.

Parameters live in a flat dict (a pytree); the model is a pure function
`apply(params, x)`; `torch.func.grad_and_value` gives gradients; the optimizer is a
pure function over the pytree (SGD with momentum + weight decay via torch._foreach).
GELU is the tanh approximation from the original BERT/GPT-2 code. bf16 autocast.
"""
import argparse, json, math, sys, time
import torch
import torch.nn.functional as F
from torch.func import grad_and_value


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

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_bert(x):
    return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_fused(x):
    return F.gelu(x, approximate="tanh")


def init_params(key, vocab, seq, d, tok_hidden, ch_hidden, layers, dev):
    g = torch.Generator().manual_seed(key)

    def dense(i, o):
        return (torch.randn(i, o, generator=g) / math.sqrt(i)).to(dev), torch.zeros(o, device=dev)

    p = {"embed": (torch.randn(vocab, d, generator=g) * 0.02).to(dev)}
    for l in range(layers):
        for name, (i, o) in {"tok1": (seq, tok_hidden), "tok2": (tok_hidden, seq),
                             "ch1": (d, ch_hidden), "ch2": (ch_hidden, d)}.items():
            p[f"{l}.{name}.w"], p[f"{l}.{name}.b"] = dense(i, o)
        for n in ("ln1", "ln2"):
            p[f"{l}.{n}.g"], p[f"{l}.{n}.b"] = torch.ones(d, device=dev), torch.zeros(d, device=dev)
    p["head.w"], p["head.b"] = dense(d, vocab)
    return p


def apply(params, ids, layers, act):
    x = params["embed"][ids]                                   # (B, S, D)
    d = x.shape[-1]
    for l in range(layers):
        h = F.layer_norm(x, (d,), params[f"{l}.ln1.g"], params[f"{l}.ln1.b"]).transpose(1, 2)  # (B, D, S)
        h = act(h @ params[f"{l}.tok1.w"] + params[f"{l}.tok1.b"]) @ params[f"{l}.tok2.w"] + params[f"{l}.tok2.b"]
        x = x + h.transpose(1, 2)
        h = F.layer_norm(x, (d,), params[f"{l}.ln2.g"], params[f"{l}.ln2.b"])
        h = act(h @ params[f"{l}.ch1.w"] + params[f"{l}.ch1.b"]) @ params[f"{l}.ch2.w"] + params[f"{l}.ch2.b"]
        x = x + h
    return x @ params["head.w"] + params["head.b"]


def make_loss(layers, act, amp, dev_type):
    def loss_fn(params, ids, targets):
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=amp):
            logits = apply(params, ids, layers, act)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    return loss_fn


def sgd_init(params):
    return {k: torch.zeros_like(v) for k, v in params.items()}


def sgd_update(params, grads, mom, lr=0.05, beta=0.9, wd=1e-4):
    keys = list(params)
    p, g, m = [params[k] for k in keys], [grads[k] for k in keys], [mom[k] for k in keys]
    torch._foreach_add_(g, p, alpha=wd)
    torch._foreach_mul_(m, beta)
    torch._foreach_add_(m, g)
    torch._foreach_add_(p, m, alpha=-lr)
    return params, mom


def main():
    args = make_parser(__doc__).parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        B, vocab, seq, d, th, ch, layers = 32, 8192, 512, 768, 1024, 3072, 6
    else:
        B, vocab, seq, d, th, ch, layers = 4, 256, 32, 32, 64, 128, 2
    params = init_params(0, vocab, seq, d, th, ch, layers, dev)
    mom = sgd_init(params)
    act = gelu_fused if args.fixed else gelu_bert
    step_grad = grad_and_value(make_loss(layers, act, cuda, dev.type))
    data = torch.randint(0, vocab, (8, B, seq + 1), device=dev)
    loop = Loop(args, dev, timer="events")
    for i in range(args.iters):
        loop.begin(i)
        chunk = data[i % data.shape[0]]
        grads, loss = step_grad(params, chunk[:, :-1], chunk[:, 1:])
        params, mom = sgd_update(params, grads, mom)
        loop.end(i)
    loop.report("func_mixer", applied_fixes(args), "event before iteration 5 and before the end")


if __name__ == "__main__":
    main()
