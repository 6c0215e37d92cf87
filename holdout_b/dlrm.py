"""DLRM-style click-through-rate model trained on a synthetic Criteo-like stream.

13 dense features go through a bottom MLP, 26 multi-hot categorical features
are sum-pooled from embedding tables, pairwise dot-product interactions feed a
top MLP, and the model is trained with BCE (SGD on the tables, Adam on the
MLPs). Batches come from a generator over a pre-staged pool.
"""
import argparse
import itertools
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(sizes, last_act=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TableList(nn.Module):
    def __init__(self, sizes, dim):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in sizes)
        for t, n in zip(self.tables, sizes):
            nn.init.uniform_(t.weight, -n ** -0.5, n ** -0.5)

    def forward(self, sparse):  # sparse: (B, T, L)
        return torch.stack([t(sparse[:, k]) for k, t in enumerate(self.tables)], dim=1)


class ConcatTables(nn.Module):
    def __init__(self, sizes, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(sum(sizes), dim))
        start = 0
        for n in sizes:
            nn.init.uniform_(self.weight.data[start:start + n], -n ** -0.5, n ** -0.5)
            start += n
        base = torch.tensor([0] + list(itertools.accumulate(sizes))[:-1])
        self.register_buffer("base", base)

    def forward(self, sparse):
        b, t, l = sparse.shape
        flat = (sparse + self.base.view(1, t, 1)).view(b * t, l)
        return F.embedding_bag(flat, self.weight, mode="sum").view(b, t, -1)


class DLRM(nn.Module):
    def __init__(self, table_sizes, dim, concat_tables, width=1024):
        super().__init__()
        self.bottom = mlp([13, width // 2, width // 4, dim])
        self.emb = (ConcatTables if concat_tables else TableList)(table_sizes, dim)
        n = len(table_sizes) + 1
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = mlp([dim + li.numel(), width, width, width // 2, width // 4, 1], last_act=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        e = self.emb(sparse)
        z = torch.cat([x.unsqueeze(1).to(e.dtype), e], dim=1)
        zz = torch.bmm(z, z.transpose(1, 2))
        inter = zz[:, self.li, self.lj]
        return self.top(torch.cat([x.to(inter.dtype), inter], dim=1)).squeeze(1)


def batch_stream(pool):
    """Yields (dense, sparse, label) forever."""
    while True:
        for batch in pool:
            yield batch


def make_pool(n_batches, batch, table_sizes, hot, dev):
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    sizes = torch.tensor(table_sizes, device=dev).view(1, -1, 1)
    pool = []
    for _ in range(n_batches):
        dense = torch.randn(batch, 13, device=dev, generator=g).abs().log1p()
        u = torch.rand(batch, len(table_sizes), hot, device=dev, generator=g)
        sparse = (u.pow(3) * sizes).long().clamp_max(sizes - 1)   # skewed ids
        label = (torch.rand(batch, device=dev, generator=g) < 0.25).float()
        pool.append((dense, sparse, label))
    return pool


def main():
    ap = argparse.ArgumentParser(description="DLRM CTR training")
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace")
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et")
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)

    if cuda:
        table_sizes = [300_000 // (1 + (i * 7) % 11) for i in range(26)]
        batch, dim, hot, width = 16384, 64, 3, 1024
    else:
        table_sizes = [2000 // (1 + (i * 7) % 11) for i in range(26)]
        batch, dim, hot, width = 128, 16, 3, 64

    model = DLRM(table_sizes, dim, concat_tables=args.fixed, width=width).to(dev)
    emb_params = list(model.emb.parameters())
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    opt_sparse = torch.optim.SGD(emb_params, lr=0.05)
    opt_dense = torch.optim.Adam(dense_params, lr=1e-3, fused=cuda)
    stream = batch_stream(make_pool(8, batch, table_sizes, hot, dev))

    k = min(args.trace_iters, args.iters)
    profiling = bool(args.trace or args.et)
    win = max(0, min(10, args.iters - k)) if profiling else args.iters
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    spans = []
    loss_sum = torch.zeros((), device=dev)
    prof = et = None
    for it, (dense, sparse, label) in zip(range(args.iters), stream):
        if profiling and it == win:
            if args.et:
                et = torch.profiler.ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True)
            prof.start()
        timed = 5 <= it < win
        if timed:
            if cuda:
                t0 = torch.cuda.Event(enable_timing=True)
                t1 = torch.cuda.Event(enable_timing=True)
                t0.record()
            else:
                t0 = time.perf_counter()

        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            logit = model(dense, sparse)
        loss = F.binary_cross_entropy_with_logits(logit.float(), label)
        opt_sparse.zero_grad(set_to_none=True)
        opt_dense.zero_grad(set_to_none=True)
        loss.backward()
        opt_sparse.step()
        opt_dense.step()
        loss_sum += loss.detach()

        if timed:
            if cuda:
                t1.record()
                spans.append((t0, t1))
            else:
                spans.append(time.perf_counter() - t0)
        if prof is not None and it == win + k - 1:
            prof.stop()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            if et is not None:
                et.stop()
                et.unregister_callback()
            prof = None

    if cuda:
        torch.cuda.synchronize()
        ms = [a.elapsed_time(b) for a, b in spans]
    else:
        ms = [s * 1e3 for s in spans]
    iter_ms = sum(ms) / len(ms) if ms else None
    print(f"dlrm: {len(table_sizes)} tables, {sum(table_sizes)} rows, "
          f"mean loss {loss_sum.item() / args.iters:.4f}")
    print("HOLDOUT_RESULT " + json.dumps({
        "program": "dlrm",
        "fixes": ["all"] if args.fixed else [],
        "iters": args.iters,
        "iter_ms": iter_ms,
        "timing": "mean of per-iteration CUDA event pairs, iterations 5..%d" % (win - 1)
                  if cuda else "mean of per-iteration perf_counter spans, iterations 5..%d" % (win - 1),
    }), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
