"""tensight.repeats: which op calls the hardware pass marks as repeats (CPU torch)."""

from __future__ import annotations

import torch

from tensight import repeats


def key(func: object, *args: object, **kwargs: object) -> tuple[object, ...]:
    return repeats.op_key(func, args, kwargs)


def test_a_call_repeats_only_with_the_same_operands_layout() -> None:
    add = torch.ops.aten.add.Tensor
    a, b = torch.randn(64, 32), torch.randn(64, 32)
    assert key(add, a, b) == key(add, torch.randn(64, 32), torch.randn(64, 32))
    assert key(add, a, b) != key(add, a, b.t().contiguous().t())  # strides
    assert key(add, a, b) != key(add, a, b.double())  # dtype
    assert key(add, a, b) != key(add, a[1:], b[1:])  # shape and offset
    assert key(add, a, b) != key(add, a, b, alpha=2)  # a scalar argument
    assert key(add, a, b) != key(torch.ops.aten.sub.Tensor, a, b)  # the op
    # Python's 2 == 2.0 == True, but int, float and bool scalars pick different kernels.
    mul = torch.ops.aten.mul.Tensor
    assert len({key(mul, a, 2), key(mul, a, 2.0), key(mul, a, True)}) == 3
    full = torch.ops.aten.full.default
    assert key(full, [3], 1) != key(full, [3], 1.0)
    # Keyword arguments count by name, not only by value.
    assert key(full, [3], 1, dtype=torch.float32) != key(full, [3], 1, layout=torch.float32)
    # Pointer alignment picks vectorized kernels: an offset of one float is another call.
    flat = torch.randn(2049)
    assert key(add, flat[:2048], flat[:2048]) != key(add, flat[1:], flat[1:])


def test_the_marker_counts_and_wraps_repeats(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pushed: list[str] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: pushed.append(name) or 0)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: pushed.append("pop") or 0)
    x = torch.randn(8, 8)
    m = repeats.RepeatMarker()
    with m:
        for _ in range(3):
            torch.relu(x + 1)
    assert m.calls == 6 and m.repeats == 4, (m.calls, m.repeats)  # add and relu, twice more
    assert pushed == [repeats.RANGE, "pop"] * 4
    # A repeated call that fails still pops its range.
    pushed.clear()
    bad = torch.randn(3, 3)
    with m:
        for _ in range(2):
            try:
                torch.ops.aten.add.Tensor(x, bad)
            except RuntimeError:
                pass
    assert pushed == [repeats.RANGE, "pop"], pushed


def test_higher_order_ops_pass_through() -> None:
    # torch.cond dispatches to the mode as a higher-order op: it runs, unmarked.
    x = torch.randn(4)
    m = repeats.RepeatMarker()
    with m:
        for _ in range(2):
            y = torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))
    assert torch.equal(y, x + 1 if x.sum() > 0 else x - 1)
