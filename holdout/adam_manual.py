"""Hand-rolled Adam(W) update over a flat list of parameter tensors.

No nn.Module and no torch.optim: the "model" is just a list of tensors with the
shapes of a 24-layer, d=384 transformer, and the gradients are fixed random
tensors. One iteration = one optimizer update of every tensor.

    python adam_manual.py           # per-tensor python loop
    python adam_manual.py --fixed   # multi-tensor (torch._foreach_*) update
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile


def transformer_shapes(n_layer, d, vocab):
    shapes = [(vocab, d), (1024, d)]
    for _ in range(n_layer):
        shapes += [
            (d,), (d,),                 # ln_1
            (3 * d, d), (3 * d,),       # qkv
            (d, d), (d,),               # attn proj
            (d,), (d,),                 # ln_2
            (4 * d, d), (4 * d,),       # fc
            (d, 4 * d), (d,),           # fc proj
        ]
    shapes += [(d,), (d,)]
    return shapes


def adam_update_loop(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bc2_sqrt = math.sqrt(bias_correction2)
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        p.mul_(1 - lr * weight_decay)
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bc2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-step_size)


def adam_update_foreach(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay):
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bc2_sqrt = math.sqrt(bias_correction2)
    torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_mul_(exp_avgs, beta1)
    torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bc2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="use multi-tensor foreach kernels")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"

    n_layer, d, vocab = (24, 384, 8192) if cuda else (4, 64, 512)
    g = torch.Generator(device="cpu").manual_seed(1234)
    shapes = transformer_shapes(n_layer, d, vocab)
    params = [torch.randn(s, generator=g).mul_(0.02).to(dev) for s in shapes]
    grads = [torch.randn(s, generator=g).mul_(1e-3).to(dev) for s in shapes]
    exp_avgs = [torch.randn(s, generator=g).mul_(1e-4).to(dev) for s in shapes]
    exp_avg_sqs = [torch.rand(s, generator=g).mul_(1e-6).to(dev) for s in shapes]
    n_el = sum(p.numel() for p in params)
    print(f"{len(params)} tensors, {n_el / 1e6:.1f}M elements, device={dev}")

    update = adam_update_foreach if args.fixed else adam_update_loop
    hp = dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)

    k = min(args.trace_iters, args.iters)
    want_prof = bool(args.trace or args.et)
    p0 = (10 if args.iters >= 10 + k else max(0, args.iters - k)) if want_prof else -1
    prof_iters = set(range(p0, p0 + k)) if want_prof else set()

    # one event per iteration boundary, read at the end
    if cuda:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters + 1)]
    else:
        marks = [None] * (args.iters + 1)
    host_marks = [0.0] * (args.iters + 1)

    def mark(i):
        if cuda:
            marks[i].record()
        else:
            host_marks[i] = time.perf_counter()

    def run(first, last):
        for it in range(first, last):
            mark(it)
            update(params, grads, exp_avgs, exp_avg_sqs, it + 1, **hp)

    if want_prof:
        run(0, p0)
        et = None
        if args.et:
            et = ExecutionTraceObserver()
            et.register_callback(args.et)
            et.start()
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
            record_shapes=True,
            with_stack=True,
        ) as prof:
            run(p0, p0 + k)
            mark(p0 + k)
        if et is not None:
            et.stop()
            et.unregister_callback()
        if args.trace:
            prof.export_chrome_trace(args.trace)
        run(p0 + k, args.iters)
    else:
        run(0, args.iters)
    mark(args.iters)
    if cuda:
        torch.cuda.synchronize()
        per_iter = [marks[i].elapsed_time(marks[i + 1]) for i in range(args.iters)]
    else:
        per_iter = [(host_marks[i + 1] - host_marks[i]) * 1e3 for i in range(args.iters)]

    # with a profiled window, only the iterations before it are timed (profiling can slow what follows)
    steady = [t for i, t in enumerate(per_iter) if i >= 5 and (not want_prof or i < p0)]
    if not steady:
        steady = [t for i, t in enumerate(per_iter) if i >= 1 and i not in prof_iters]
    if not steady:
        steady = per_iter[1:] or per_iter
    iter_ms = statistics.median(steady)
    print(f"median update {iter_ms:.3f} ms over {len(steady)} iterations; "
          f"param checksum {sum(float(p.float().sum()) for p in params[:4]):.5f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "adam_manual",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": "CUDA events at every iteration boundary, median of steady-state iterations",
    }), file=sys.stderr)


if __name__ == "__main__":
    main()
