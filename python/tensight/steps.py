"""Where a step of the program ends: global hooks, no help from the program.

In order of trust, :class:`StepFinder` ends a step at

- ``Mode.OPTIMIZER``: the post hook of ``Optimizer.step`` (a global hook, so every
  optimizer). With several optimizers the iteration is learned: the boundary is the
  step of the optimizer that ran last before the first one repeated (D, G, D -> G ends
  an iteration). A step skipped by ``GradScaler`` (inf/nan) is no boundary.
- ``Mode.FORWARD``: while no optimizer has stepped, top-level calls (depth 0) of modules
  that own parameters (a loss module or a transform is no step), in the thread of the
  first module call, with the same learning; calls inside ``torch.compile`` are not
  seen. An optimizer step later switches to ``OPTIMIZER``; a loop of the user's code
  chosen as the step loop (below) later switches to ``LOOP``: the model's calls are
  then parts of a step (micro-batches of a request batch, tokens of a generation), and
  where one call is one iteration the two agree.
- ``Mode.LOOP``: neither: the back edges of the loop of the user's code that holds the
  work (:mod:`tensight.loops`). An optimizer step later switches to ``OPTIMIZER``. A
  loop running inside a module's call or an optimizer's step (a recurrence unrolled in
  ``forward``) is inside the step, never the step loop.

The first event of the optimizer and forward kinds is a provisional boundary (the
iteration is not learned yet), so steps are counted from the first iteration's end.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from enum import Enum
from types import FrameType
from typing import Any

import torch

from tensight.loops import PATIENCE_S, Loop, LoopWatch, static_loops

#: Seconds forward steps wait, from the first, for a loop of the user's code around the
#: model's calls to be chosen as the step loop or set aside (then loops are not watched).
FORWARD_WAIT_S = 2 * PATIENCE_S


class Mode(str, Enum):
    """How steps were found (the manifest's ``step_detection``)."""

    OPTIMIZER = "optimizer"
    FORWARD = "forward"
    LOOP = "loop"


def _compiling() -> bool:
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(fn()) if fn is not None else False


class Cycle:
    """Learns which of several recurring events ends an iteration: the last distinct
    event before the first repeat. The very first event is a provisional boundary."""

    def __init__(self) -> None:
        self.last: int | None = None
        self._seen: set[int] = set()
        self._prev: int | None = None

    @property
    def learned(self) -> bool:
        return self.last is not None

    def feed(self, key: int) -> bool:
        """Whether the event `key` ends an iteration."""
        if self.last is not None:
            return key == self.last
        if key in self._seen:
            self.last = self._prev
            return key == self.last
        first = not self._seen
        self._seen.add(key)
        self._prev = key
        return first


class StepFinder:
    """Installs the hooks and calls `on_boundary()` at the end of each step.

    `on_switch(old, new)` is called when an optimizer step overrides forward or loop
    steps, or a step loop overrides forward steps (the owner drops what it recorded with
    those); `choose_loop(chain)` picks the step loop among candidates (innermost first),
    or None. `auto=False`: no hooks; the owner calls its own boundaries in `mode`."""

    def __init__(self, on_boundary: Callable[[], None], on_switch: Callable[[Mode, Mode], bool],
                 choose_loop: Callable[[list[Loop]], Loop | None], *, auto: bool = True,
                 mode: Mode | None = None, loops: bool = True,
                 on_loop_end: Callable[[Loop], None] | None = None,
                 loops_over_forward: bool = True) -> None:
        self.mode: Mode | None = None if auto else (mode or Mode.FORWARD)
        self._on_boundary = on_boundary
        self._on_switch = on_switch
        self._choose_loop = choose_loop
        self._on_loop_end = on_loop_end
        self._auto = auto
        self._want_loops = loops
        self._loops_over_forward = loops_over_forward
        self._handles: list[Any] = []
        self._fwd_handles: list[Any] = []
        self._opt_cycle = Cycle()
        self._fwd_cycle = Cycle()
        self._fwd_tid: int | None = None
        self._fwd_since = 0.0
        self._depth = 0
        self._owns_params: dict[int, bool] = {}
        self.loop_watch: LoopWatch | None = None
        self.enabled = True
        self.on_error: Callable[[BaseException], None] = lambda e: None

    @property
    def learned(self) -> bool:
        """Whether a boundary now ends a whole iteration."""
        if not self._auto or self.mode is Mode.LOOP:
            return True
        return (self._opt_cycle if self.mode is Mode.OPTIMIZER else self._fwd_cycle).learned

    @property
    def loop(self) -> Loop | None:
        return self.loop_watch.chosen if self.loop_watch is not None else None

    def install(self) -> str | None:
        """Install the hooks; returns why loop detection is off, if it is."""
        if not self._auto:
            return None
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module

        self._handles.append(optim_module.register_optimizer_step_post_hook(self._on_opt_step))
        self._fwd_handles.append(nn_module.register_module_forward_pre_hook(self._on_fwd_pre))
        try:
            h = nn_module.register_module_forward_hook(self._on_fwd_post, always_call=True)
        except TypeError:  # torch < 2.1: no always_call (an exception in forward desyncs depth)
            h = nn_module.register_module_forward_hook(self._on_fwd_post)
        self._fwd_handles.append(h)
        if not self._want_loops:
            return None
        watch = LoopWatch(self._choose, self._on_loop_step, self._loop_left)
        if not watch.start():
            return watch.note
        self.loop_watch = watch
        return None

    def remove(self) -> None:
        """Remove every hook (idempotent)."""
        for h in self._handles + self._fwd_handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self._handles.clear()
        self._fwd_handles.clear()
        self._stop_loops()

    def _stop_loops(self) -> None:
        if self.loop_watch is not None:
            self.loop_watch.stop()

    def _drop_forward_hooks(self) -> None:
        for h in self._fwd_handles:  # forward hooks cost on every module call
            h.remove()
        self._fwd_handles.clear()

    # ---- optimizer ---------------------------------------------------------------------

    def _on_opt_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.enabled:
            return
        try:
            if self.mode is not Mode.OPTIMIZER:
                old = self.mode
                if old is not None and not self._on_switch(old, Mode.OPTIMIZER):
                    self.remove()  # the owner keeps what it recorded in the old mode
                    return
                self.mode = Mode.OPTIMIZER
                self._drop_forward_hooks()
                self._stop_loops()
            if self._opt_cycle.feed(id(optimizer)):
                self._on_boundary()
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001 - never break the user's program
            self.on_error(e)

    # ---- module forwards ---------------------------------------------------------------

    def _on_fwd_pre(self, module: Any, args: Any) -> None:
        if not self.enabled or _compiling():
            return None
        tid = threading.get_ident()
        if self._fwd_tid != tid:
            if self._fwd_tid is not None:
                return None
            self._fwd_tid = tid
        self._depth += 1
        return None

    def _on_fwd_post(self, module: Any, args: Any, output: Any) -> None:
        if not self.enabled or _compiling() or self._fwd_tid != threading.get_ident():
            return None
        self._depth = max(0, self._depth - 1)
        if self._depth or self.mode in (Mode.OPTIMIZER, Mode.LOOP):
            return None
        try:
            key = id(module)
            owns = self._owns_params.get(key)
            if owns is None:
                owns = self._owns_params[key] = next(module.parameters(), None) is not None
            if owns and self._fwd_cycle.feed(key):
                if self.mode is None:
                    self.mode = Mode.FORWARD
                    self._fwd_since = time.monotonic()
                    if not self._loops_over_forward:
                        self._stop_loops()
                self._on_boundary()
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001
            self.on_error(e)
        return None

    def forward_waits(self) -> bool:
        """Whether forward steps wait before their window: called in a model call's
        hook, a loop of the user's code around the call may still become the step loop
        (it has not repeated yet, or waits for the loops around it), for at most
        :data:`FORWARD_WAIT_S` after the first forward step; after that loops are no
        longer watched and forward steps are the steps."""
        watch = self.loop_watch
        if self.mode is not Mode.FORWARD or not self._loops_over_forward or watch is None \
                or not watch.active or watch.chosen is not None:
            return False
        if time.monotonic() - self._fwd_since > FORWARD_WAIT_S:
            self._stop_loops()
            return False
        return _undecided_loop_around_the_call(watch)

    # ---- loops -------------------------------------------------------------------------

    def _choose(self, chain: list[Loop]) -> Loop | None:
        forward = self.mode is Mode.FORWARD and self._loops_over_forward
        if (self.mode is not None and not forward) or not self.enabled:
            return None
        outside = [lp for lp in chain if not in_a_step_call(lp)]
        if not outside:
            return None
        chosen = self._choose_loop(outside)
        if chosen is None:
            return None
        if forward:
            if not self._on_switch(Mode.FORWARD, Mode.LOOP):
                self._stop_loops()  # the forward steps' window is written: keep it
                return None
            self._drop_forward_hooks()
        self.mode = Mode.LOOP
        return chosen

    def _loop_left(self, loop: Loop) -> None:
        """The program left the step loop: find steps again."""
        if self.mode is not Mode.LOOP or not self.enabled:
            return
        self.mode = None
        if self._on_loop_end is not None:
            self._on_loop_end(loop)

    def _on_loop_step(self) -> None:
        if self.enabled and self.mode is Mode.LOOP:
            try:
                self._on_boundary()
            except SystemExit:
                raise
            except Exception as e:  # noqa: BLE001
                self.on_error(e)


_MODULE_CALL = os.path.join("torch", "nn", "modules", "module.py")
_OPTIM = os.path.join("", "torch", "optim", "")  # /torch/optim/


def _is_module_call(f: FrameType) -> bool:
    return f.f_code.co_filename.endswith(_MODULE_CALL) and \
        f.f_code.co_name in ("_call_impl", "_wrapped_call_impl")


def _undecided_loop_around_the_call(watch: LoopWatch) -> bool:
    """Whether a loop of the user's code that the running model call is inside (a loop
    outside every module call on this thread's stack) may still be chosen."""
    around: list[bool] = []
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        if _is_module_call(f):
            around.clear()  # the loops so far run inside the model's call
        elif watch.is_user(f.f_code):
            around += [watch.may_choose(f.f_code, s) for s in static_loops(f.f_code)
                       if s.contains(f.f_lasti)]
        f = f.f_back
    return any(around)


def _is_module_init(f: FrameType) -> bool:
    """Whether `f` is the constructor of a torch.nn.Module (its `__init__`, `self` a
    module): a loop there builds the model (a parameter's init kernel per iteration)."""
    if f.f_code.co_name != "__init__":
        return False
    torch = sys.modules.get("torch")
    module = getattr(getattr(torch, "nn", None), "Module", None)
    return module is not None and isinstance(f.f_locals.get("self"), module)


def in_a_step_call(loop: Loop) -> bool:
    """Whether `loop`, running in this thread now, is inside a module's call or an
    optimizer's step (a frame of either lies between its frame and the thread's root),
    or inside a module's construction (its own frame or one above it): no step loop."""
    f: FrameType | None = sys._getframe()
    while f is not None and f.f_code is not loop.code:
        f = f.f_back
    if f is not None and _is_module_init(f):
        return True
    f = f.f_back if f is not None else None
    while f is not None:
        if _is_module_call(f) or _is_module_init(f) or _OPTIM in f.f_code.co_filename:
            return True
        f = f.f_back
    return False
