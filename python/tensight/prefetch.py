"""DataLoader prefetch: the first steps of a loader with workers do not show its cost.

A ``DataLoader`` with ``num_workers=W`` asks its workers for ``W × prefetch_factor``
batches as soon as an iterator starts (and again at each epoch of a persistent one).
The first steps take those ready batches without waiting, so a window recorded among
them shows a program that never waits for data, even where, in steady state, every
step does (a loader slower than the step). The collector's warm-up therefore goes on
until every live loader iterator has drained what it prefetched: it handed out
``W × prefetch_factor`` batches plus :data:`MARGIN` more, or one of its ``__next__``
calls after the first batch of each worker (which wait for the workers to start and
to set up sharing their tensors) blocked for :data:`BLOCKED_S` (it is waiting for its
workers: steady state).
Loaders without workers prefetch nothing and never hold the window back, nor does an
iterator the steps stopped taking batches from (:func:`pending` counts only those that
handed one out since the time it is given). :class:`Hold` is the collector's side: how
long the warm-up goes on.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from tensight.profiling import say

__all__ = ["Hold", "install", "pending", "uninstall"]

#: Batches beyond the prefetched ones the iterator must hand out.
MARGIN = 2
#: Steps beyond the warm-up that a DataLoader's prefetch may hold the window back.
WAIT_MAX = 48
#: Unprofiled steps timed after the prefetch drained, before the window.
TIMED_AFTER = 3
#: A ``__next__`` that blocks this long waited for its workers (seconds): longer than a
#: ready batch takes on a loaded host (unpickling, the GIL), shorter than a real wait.
BLOCKED_S = 0.010

_live: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_saved: dict[str, Any] = {}


def _iter_class() -> Any:
    from torch.utils.data import dataloader

    return getattr(dataloader, "_MultiProcessingDataLoaderIter", None)


def install() -> None:
    """Track every multi-process loader iterator (idempotent)."""
    cls = _iter_class()
    if cls is None or _saved:
        return
    reset, nxt = cls._reset, cls.__next__

    def _reset(self: Any, loader: Any, first_iter: bool = False) -> None:
        reset(self, loader, first_iter)
        workers = int(getattr(self, "_num_workers", 0) or 0)
        factor = int(getattr(self, "_prefetch_factor", 2) or 2)
        _live[self] = {"owed": workers * factor + MARGIN, "drained": workers == 0, "last": 0.0,
                       "first": workers}

    def __next__(self: Any) -> Any:
        t = time.perf_counter()
        done = False
        try:
            return nxt(self)
        except StopIteration:
            done = True
            raise
        finally:
            st = _live.get(self)
            if st is not None and not st["drained"]:
                now = time.perf_counter()
                st["owed"] -= 1
                st["last"] = now
                blocked = now - t >= BLOCKED_S and st["first"] <= 0
                st["first"] -= 1
                if done or st["owed"] <= 0 or blocked:
                    st["drained"] = True

    _saved.update(reset=reset, next=nxt, own_next="__next__" in cls.__dict__)
    cls._reset, cls.__next__ = _reset, __next__


def uninstall() -> None:
    """Put the loader iterator's methods back."""
    cls = _iter_class()
    if cls is not None and _saved:
        cls._reset = _saved["reset"]
        if _saved["own_next"]:
            cls.__next__ = _saved["next"]
        else:
            del cls.__next__
    _saved.clear()
    _live.clear()


def pending(since: float) -> int:
    """Batches that the live loader iterators which handed out a batch after `since`
    (``time.perf_counter()``) still hand out from their prefetch (0: none)."""
    return sum(max(st["owed"], 0) for st in list(_live.values())
               if not st["drained"] and st["last"] >= since)


class Hold:
    """Whether a DataLoader the steps take batches from still hands out what its workers
    prefetched: the warm-up (`warmup` steps) goes on, up to :data:`WAIT_MAX` steps beyond
    it; once drained, :data:`TIMED_AFTER` more unprofiled steps (`timed_after_drain`) are
    timed before the window. Never on a rank of a distributed job (`distributed`): how
    long a prefetch lasts differs between ranks, and their windows must not."""

    def __init__(self, warmup: int, distributed: bool) -> None:
        self.warmup = warmup
        self.distributed = distributed
        self.timed_after_drain = 0
        self._told = False

    def waits(self, count: int, since: float | None) -> bool:
        """At boundary `count`, the last one at `since` (``time.perf_counter()``)."""
        if self.distributed:
            return False
        if count - self.warmup >= WAIT_MAX or since is None:
            return False
        left = pending(since)
        if left and not self._told:
            self._told = True
            self.timed_after_drain = min(TIMED_AFTER, max(self.warmup, 1))
            say(f"warm-up goes on while the DataLoader hands out the {left} batches its "
                "workers prefetched (steps on them would not show what loading costs)")
        return left > 0
