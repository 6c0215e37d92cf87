"""``python -m tensight.bench``: train a built-in model on synthetic data.

A plain training loop with no tensight call inside: ``tensight bench`` runs it as
``tensight run --steps N --warmup W --stop -- python -m tensight.bench ...``, which
records steps W+2..W+N+1 (W unprofiled, 1 profiler warm-up) and stops it there. Run alone
it trains W+N+3 iterations and prints one summary line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import torch

from tensight.models import MODELS, build, describe


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tensight.bench", description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=MODELS, required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20, help="steps to record (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="unrecorded steps first (default 3)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when available")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--batch-size and --steps must be >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda, but CUDA is not available", file=sys.stderr)
        return 2
    device = torch.device(name)
    torch.manual_seed(0)
    model, make_batch, loss_fn = build(args.model, args.batch_size, device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    amp = (torch.autocast(device.type, dtype=torch.bfloat16) if args.amp
           else contextlib.nullcontext())
    iters = args.warmup + args.steps + 3  # + learning, profiler warm-up and a spare one
    t0 = time.perf_counter()
    for _ in range(iters):
        batch = make_batch()
        with amp:
            loss = loss_fn(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / iters
    print(f"bench: {args.model} batch {args.batch_size} on {device} "
          f"({describe(model)['parameters'] / 1e6:.1f} M parameters"
          f"{', bf16 autocast' if args.amp else ''}): {iters} steps, {ms:.2f} ms/step, "
          f"last loss {loss.item():.4f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
