"""Marks repeated op calls during the hardware pass's step, so ncu profiles each once.

``tensight run --hardware`` runs the program again under Nsight Compute for one step.
Each kernel ncu profiles costs about a third of a second on an H200, whatever the number
of replay passes, so a ResNet-50 training step's 725 launches took 270 s. Most launches repeat one made earlier in the step by the same op
on operands of the same shapes, strides, dtypes and alignment (the same kernel, grid
and block). While the step runs, :class:`RepeatMarker` (a ``TorchDispatchMode``, which
autograd carries into its backward threads) wraps each op call whose key it has seen
in the push/pop NVTX range ``tensight_repeat`` that ncu's
``--nvtx-exclude tensight_repeat/`` skips; the engine then gives the skipped launches
the counters of the profiled launch with their signature (read/ncu.rs).

Kernels launched outside aten ops (``torch.compile``'s Triton kernels, CUDA graph
replays) are never marked: they are profiled at every launch. A key that maps to
different kernels (data-dependent ops such as ``nonzero``) may leave a launch without
counters; the report counts those.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tensight.bundle import NVTX_REPEAT as RANGE



def _leaf_key(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        try:
            strided = x.layout == torch.strided
            return (
                "T",
                tuple(x.shape),
                tuple(x.stride()) if strided else str(x.layout),
                x.dtype,
                str(x.device),
                x.storage_offset() if strided else 0,
                # Vectorized kernels are chosen by the pointer's alignment.
                x.data_ptr() % 16 if strided else 0,
            )
        except Exception:  # noqa: BLE001 - an exotic tensor: never a repeat
            return ("T", id(x))
    if x is None or isinstance(x, (bool, int, float, complex, str)):
        # Typed: 2, 2.0 and True are equal in Python but pick different kernels.
        return (type(x).__name__, x)
    if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(x)
    return (type(x).__name__, repr(x) if isinstance(x, torch.SymInt) else id(x))


def op_key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> tuple[Any, ...]:
    """What decides the kernels an op call launches: the overload and every argument
    (tensors by shape, strides, dtype, device, offset and pointer alignment; keyword
    arguments by name too)."""
    named = tuple((k, tuple(_leaf_key(x) for x in tree_leaves(v)))
                  for k, v in sorted((kwargs or {}).items()))
    return (func, tuple(_leaf_key(x) for x in tree_leaves(args)), named)


class RepeatMarker(TorchDispatchMode):
    """Wraps op calls already seen (by :func:`op_key`) in the NVTX range ``RANGE``.
    Higher-order ops (``torch.cond``, ``flex_attention``, ...) pass through unmarked."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[Any, ...]] = set()
        self.calls = 0
        self.repeats = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **(kwargs or {}))
        self.calls += 1
        try:
            key = op_key(func, args, kwargs)
            hash(key)
        except Exception:  # noqa: BLE001 - unhashable argument: profile it
            return func(*args, **(kwargs or {}))
        if key not in self.seen:
            self.seen.add(key)
            return func(*args, **(kwargs or {}))
        self.repeats += 1
        torch.cuda.nvtx.range_push(RANGE)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            torch.cuda.nvtx.range_pop()


def nvtx_works() -> bool:
    """Whether this torch build has NVTX (CPU-only builds may not)."""
    try:
        torch.cuda.nvtx.range_push(RANGE)
        torch.cuda.nvtx.range_pop()
        return True
    except Exception:  # noqa: BLE001
        return False


def compiled_code_ran() -> bool:
    """Whether ``torch.compile`` has compiled anything in this process: a dispatch mode
    would change what compiled code runs, so the pass then profiles every launch."""
    import sys

    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None)
    if counters is None:
        return False
    try:
        return sum(counters["stats"].values()) > 0 or bool(counters["frames"].get("ok", 0))
    except Exception:  # noqa: BLE001
        return True
