"""``tensight run --hardware``'s second run, under Nsight Compute: no profiler.

Step K (``TENSIGHT_HARDWARE_STEP``, counted as the window counts: step K runs between
boundaries K-1 and K) is wrapped in the NVTX start/end range :data:`bundle.NVTX_STEP`
that ncu's ``--nvtx-include`` selects (process-wide: every thread's kernels). Steps are
found as in the first run (:class:`tensight.steps.StepFinder`); a loop found there
(``TENSIGHT_HARDWARE_LOOP=FILE:LINE``, from the first run's manifest) is taken as soon as
it repeats. With repeats (``TENSIGHT_HARDWARE_REPEATS=skip``) op calls that repeat an
earlier one of the step are marked for ncu to skip (:mod:`tensight.repeats`). Writes
only ``ncu_range.json`` (whether the range closed, how many op calls were marked) into
the bundle, never the manifest or a trace.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from pathlib import Path
from typing import Any

import torch

from tensight import bundle as contract
from tensight.loops import Loop
from tensight.profiling import say, stop_program
from tensight.steps import Mode, StepFinder


_active: HardwareCollector | None = None  # the one of this process


class HardwareCollector:
    """Counts steps and wraps step K in the NVTX range ncu profiles."""

    def __init__(self, bundle: str | os.PathLike[str], step: int, *, stop: bool,
                 repeats: bool = False, loop: tuple[str, int] | None = None) -> None:
        self.bundle = Path(bundle).resolve()
        self.hw_step = max(1, int(step))
        self.stop = stop
        self.repeats = repeats
        self.loop_target = loop
        self.pid = os.getpid()
        self.count = 0
        self.range = "none"  # -> open -> closed
        self.finished = False
        self._marker: Any = None
        self.op_calls: int | None = None
        self.op_repeats: int | None = None
        self.repeats_note: str | None = None
        self._lock = threading.RLock()
        # Forward steps give way to a loop only where the first run's steps were a loop's.
        self.finder = StepFinder(self._on_boundary, self._on_switch, self._choose_loop,
                                 loops_over_forward=loop is not None)
        self.finder.on_error = self._fail

    @property
    def mode(self) -> Mode | None:
        return self.finder.mode

    def install(self) -> None:
        global _active
        _active = self
        self.finder.install()
        if self.hw_step == 1:
            self._push()

    def install_exit_handlers(self) -> None:
        atexit.register(self._at_exit)

    def _fail(self, e: BaseException) -> None:
        say(f"hardware pass: collector error ({type(e).__name__}: {e})")
        self.finder.enabled = False
        self.finder.remove()

    def _choose_loop(self, chain: list[Loop]) -> Loop | None:
        if self.loop_target is None:
            return chain[-1] if chain else None  # no profile to weigh: the outermost
        file, line = self.loop_target
        for lp in chain:
            if lp.static.line == line and os.path.realpath(lp.code.co_filename) == \
                    os.path.realpath(file):
                return lp
        return None

    def _push(self) -> None:
        _sync()
        self._mark_repeats()
        _nvtx(contract.NVTX_STEP)
        self.range = "open"

    def _close(self) -> None:
        _sync()  # the step's kernels ran inside the range
        _nvtx(None)
        marker, self._marker = self._marker, None
        if marker is None:
            return
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if id(_get_current_dispatch_mode()) != id(marker):
            # The program entered or left a dispatch mode of its own across the step
            # boundary: popping now would pop its mode. The marker stays (inert after the
            # step: it only adds NVTX ranges that no filter selects).
            self.repeats_note = ("the program's own dispatch modes crossed the step: "
                                 "repeats were marked, the marker left in place")
        else:
            try:
                marker.__exit__(None, None, None)
            except Exception as e:  # noqa: BLE001 - never break the program
                say(f"hardware pass: {type(e).__name__} leaving the repeat marker: {e}")
        self.op_calls, self.op_repeats = marker.calls, marker.repeats

    def _mark_repeats(self) -> None:
        if not self.repeats:
            return
        from tensight import repeats

        if self.hw_step == 1:
            # Step 1 compiles and autotunes; a dispatch mode would make torch.compile
            # skip its frames and run them eagerly.
            self.repeats_note = "step 1: every launch profiled"
            return
        if repeats.compiled_code_ran():
            self.repeats_note = "torch.compile ran: every launch profiled"
            return
        if torch._C._len_torch_dispatch_stack() > 0:
            self.repeats_note = "the program runs a dispatch mode: every launch profiled"
            return
        if not repeats.nvtx_works():
            self.repeats_note = "no NVTX in this torch build: every launch profiled"
            return
        try:
            marker = repeats.RepeatMarker()
            marker.__enter__()
            self._marker = marker
        except Exception as e:  # noqa: BLE001
            self.repeats_note = f"no repeat marker ({type(e).__name__}: {e})"

    def _on_switch(self, old: Mode, new: Mode) -> bool:
        with self._lock:
            if self.range == "closed":
                return False
            if self.range == "open":  # forward or loop steps were wrong
                self._close()
                self.op_calls = self.op_repeats = None
                self.range = "none"
            self.count = 0
            if self.hw_step == 1:
                self._push()
            return True

    def _on_boundary(self) -> None:
        with self._lock:
            self.count += 1
            if self.range == "open" and self.count >= self.hw_step:
                self._close()
                self.range = "closed"
                self.finder.remove()
                self.finish("completed")
                marked = (f"; {self.op_repeats} of {self.op_calls} op calls repeat an earlier "
                          "one (marked for ncu to skip)" if self.op_calls is not None else "")
                say(f"hardware pass: {self.mode.value if self.mode else '?'} step {self.count} "
                    f"wrapped in NVTX range {contract.NVTX_STEP}{marked}")
                if self.repeats_note:
                    say(f"hardware pass: {self.repeats_note}")
                if self.stop:
                    stop_program()
            elif self.range == "none" and self.count == self.hw_step - 1:
                self._push()

    def finish(self, status: str) -> None:
        self.finished = True
        self.finder.enabled = False
        self.finder.remove()
        try:
            data = json.dumps({"step": self.hw_step, "range": self.range,
                               "detection": self.mode.value if self.mode else None,
                               "steps_seen": self.count, "program": status,
                               "op_calls": self.op_calls, "op_repeats": self.op_repeats,
                               "repeats_note": self.repeats_note})
            contract.write_atomic(self.bundle / contract.NCU_RANGE, data + "\n")
        except Exception as e:  # noqa: BLE001
            say(f"could not write {contract.NCU_RANGE} ({type(e).__name__}: {e})")

    def _at_exit(self) -> None:
        if os.getpid() != self.pid or self.finished:
            return
        self.finish("completed")
        if self.range != "closed":
            say(f"hardware pass: the program ended after {self.count} steps, "
                f"before step {self.hw_step}")


_nvtx_missing = False
_nvtx_id: int | None = None


def _nvtx(start: str | None) -> None:
    """``range_start(start)``, or ``range_end()`` of it for None; a build without NVTX
    (CPU-only torch) is said once. A start/end range, not push/pop: push/pop ranges are
    per thread, so the backward pass's kernels, launched from the autograd engine's
    threads, would fall outside it."""
    global _nvtx_missing, _nvtx_id
    try:
        if start is None:
            if _nvtx_id is not None:
                torch.cuda.nvtx.range_end(_nvtx_id)
                _nvtx_id = None
        else:
            _nvtx_id = torch.cuda.nvtx.range_start(start)
    except Exception as e:  # noqa: BLE001 - never break the program
        if not _nvtx_missing:
            _nvtx_missing = True
            say(f"hardware pass: no NVTX range ({type(e).__name__}: {e})")


def _sync() -> None:
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        pass


def _loop_from_env() -> tuple[str, int] | None:
    raw = os.environ.get("TENSIGHT_HARDWARE_LOOP", "")
    file, sep, line = raw.rpartition(":")
    if not sep or not line.isdigit():
        return None
    return file, int(line)


def install_from_env() -> HardwareCollector:
    from tensight.collect import env_choice, env_int

    hw = HardwareCollector(os.environ["TENSIGHT_BUNDLE"],
                           step=env_int("TENSIGHT_HARDWARE_STEP",
                                        max(1, env_int("TENSIGHT_WARMUP", 3, 0)) + 1, 1),
                           stop=os.environ.get("TENSIGHT_STOP", "0") == "1",
                           repeats=env_choice("TENSIGHT_HARDWARE_REPEATS", "profile",
                                              ("profile", "skip")) == "skip",
                           loop=_loop_from_env())
    hw.install()
    hw.install_exit_handlers()
    return hw
