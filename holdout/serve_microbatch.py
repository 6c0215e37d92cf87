"""Batch-inference service benchmark: an embedding-projection MLP scoring request batches.

Each iteration one batch of requests arrives (4096 feature vectors); the
service splits it into micro-batches of at most `max_batch_size` rows, runs the
model on each, and gathers the answers. Latency is measured per request batch,
synchronising at the end of each one, as the service's own SLO dashboard does.

    python serve_microbatch.py            # max_batch_size from the service config (32)
    python serve_microbatch.py --fixed    # run the whole request batch at once
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile


@dataclass
class ServiceConfig:
    d_in: int = 4096
    hidden: int = 8192
    d_out: int = 4096
    requests_per_batch: int = 4096
    max_batch_size: int = 32  # chosen when the service ran on a small inference card


class Projector(nn.Module):
    def __init__(self, cfg: ServiceConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg.d_in, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.d_out),
        )
        self.norm = nn.LayerNorm(cfg.d_out)

    def forward(self, x):
        return nn.functional.normalize(self.norm(self.net(x)), dim=-1)


class Service:
    def __init__(self, model: nn.Module, cfg: ServiceConfig):
        self.model = model
        self.cfg = cfg

    @torch.inference_mode()
    def handle(self, requests: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        mbs = self.cfg.max_batch_size
        for start in range(0, requests.shape[0], mbs):
            out[start:start + mbs] = self.model(requests[start:start + mbs])
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed", action="store_true", help="one forward pass over the whole request batch")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--trace-iters", type=int, default=5)
    ap.add_argument("--et", default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    cfg = ServiceConfig() if cuda else ServiceConfig(d_in=128, hidden=256, d_out=128, requests_per_batch=256,
                                                     max_batch_size=8)
    if args.fixed:
        cfg.max_batch_size = cfg.requests_per_batch
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(3)
    model = Projector(cfg).to(device=device, dtype=dtype).eval()
    service = Service(model, cfg)
    incoming = [torch.randn(cfg.requests_per_batch, cfg.d_in, device=device, dtype=dtype) for _ in range(3)]
    out = torch.empty(cfg.requests_per_batch, cfg.d_out, device=device, dtype=dtype)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    latencies: list[float] = []

    def handle_one(i: int):
        t0 = time.perf_counter()
        service.handle(incoming[i % len(incoming)], out)
        sync()
        latencies.append((time.perf_counter() - t0) * 1e3)

    k = min(args.trace_iters, args.iters)
    tracing = bool(args.trace or args.et)
    p0 = 10 if args.iters >= 10 + k else max(0, args.iters - k)

    i = 0
    while i < args.iters:
        if tracing and i == p0:
            et = None
            if args.et:
                et = ExecutionTraceObserver()
                et.register_callback(args.et)
                et.start()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU],
                         record_shapes=True, with_stack=True) as prof:
                for _ in range(k):
                    handle_one(i)
                    i += 1
                    prof.step()
            if et is not None:
                et.stop()
                et.unregister_callback()
            if args.trace:
                prof.export_chrome_trace(args.trace)
            continue
        handle_one(i)
        i += 1

    skip = set(range(p0, p0 + k)) if tracing else set()
    steady = [t for j, t in enumerate(latencies) if j >= 5 and (not tracing or j < p0)] or \
        [t for j, t in enumerate(latencies) if j not in skip] or latencies
    p50 = statistics.median(steady)
    p90 = sorted(steady)[int(0.9 * (len(steady) - 1))]
    print(f"max_batch_size={cfg.max_batch_size}: p50 {p50:.2f} ms, p90 {p90:.2f} ms per {cfg.requests_per_batch} requests "
          f"({cfg.requests_per_batch / p50 * 1e3:.0f} req/s); checksum {out.float().sum().item():.3f}")
    print("HOLDOUT_RESULT " + json.dumps({"program": "serve_microbatch", "fixes": ["all"] if args.fixed else [],
                                          "iters": args.iters, "iter_ms": p50,
                                          "timing": "perf_counter per request batch with cuda synchronize at its end, median"}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
