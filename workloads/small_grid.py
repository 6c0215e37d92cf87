"""Planted: a custom Triton kernel (per-row sum of squares, a feature-norm statistic)
launched with one program per row: 16 rows give a grid of 16 blocks on a GPU with 132
SMs, so 116 SMs idle while each row's 16 MiB streams through one SM.

Fixed: each row split into 64 chunks (a grid of 16 × 64 programs, partial sums added
atomically): the same bytes, read by every SM.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from common import parse, run


@triton.jit
def row_sumsq(x_ptr, out_ptr, n_cols, chunk, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    row = tl.program_id(0)
    start = tl.program_id(1) * chunk
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(start, start + chunk, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        acc += v * v
    tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0))


args = parse(__doc__ or "")
dev = args.device
ROWS, COLS, BLOCK = 16, 1 << 22, 1024  # 16 × 4 Mi fp32 = 256 MiB
split = 64 if args.fixed else 1
x = torch.randn(ROWS, COLS, device=dev)
norms = torch.zeros(ROWS, device=dev)


def step(i: int) -> None:
    norms.zero_()
    for _ in range(4):  # four statistics passes per step, as a monitoring hook would
        row_sumsq[(ROWS, split)](x, norms, COLS, COLS // split, BLOCK=BLOCK)
    x.mul_(0.999)  # the step's own update, so the passes read fresh values


run(step, args.steps, "small_grid", args.fixed)
