"""The recording window (see :mod:`tensight.collect`): its profiler sessions, step by step.

:class:`Window` goes from the profiler's warm-up step (:meth:`Window.start_timed`) through
the N timed steps (one session, ``trace.json.gz``), an unprofiled step between the two
sessions and the detail step (a session of its own with everything on and the execution
trace, ``detail.json.gz``) to :attr:`State.DONE`, and keeps the facts of what it wrote
for the manifest. The collector decides when it starts and what happens once it is
written."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from torch.profiler import profile, schedule

from tensight import bundle as contract
from tensight import profiling
from tensight.loops import Loop
from tensight.profiling import quiet, say
from tensight.steps import Mode
from tensight.timing import StepTiming

__all__ = ["State", "Window"]


class State(Enum):
    """Where the recording window is."""

    WAITING = "waiting"  # warm-up steps, unprofiled
    WARMUP = "warmup"  # the profiler's warm-up step
    TIMED = "timed"  # the N timed steps
    GAP = "gap"  # one unprofiled step between the two sessions
    DETAIL = "detail"  # the detail step
    DONE = "done"


#: The states in which a profiler session of the window runs (or the gap between two).
RECORDING = (State.WARMUP, State.TIMED, State.GAP, State.DETAIL)


class Window:
    """The window of `steps` timed steps recorded into `bundle` (`timed_full`: with every
    option on, and no detail step). `on_timed()` is called when the timed steps start,
    `on_written()` once the window is written (its state is DONE then)."""

    def __init__(self, bundle: Path, steps: int, timed_full: bool,
                 on_timed: Callable[[], None], on_written: Callable[[], None]) -> None:
        self.bundle = bundle
        self.steps = steps
        self.timed_full = timed_full
        self._on_timed = on_timed
        self._on_written = on_written
        self.state = State.WAITING
        self.prof: Any = None  # the timed session, then the detail session
        self._detail_range: Any = None
        self._et: Any = None
        self._log_level: int | None = None
        # what was written
        self.warmup_done = 0  # boundaries counted before the window started
        self.recorded = 0
        self.kept: str | None = None  # "window" | "whole_program" once written
        self.detail_kept = False
        self.mode: Mode | None = None  # the steps the written window holds
        self.loop: Loop | None = None

    def timed_options(self) -> dict[str, Any]:
        return profiling.detail_options() if self.timed_full else dict(profiling.TIMED)

    def recording(self) -> str | None:
        """What the window's profiler records now (None: nothing)."""
        return f"the window ({self.state.value} step)" if self.state in RECORDING else None

    def start_timed(self, count: int) -> None:
        """Start the timed session at boundary `count`: the profiler's warm-up step, then
        the timed steps."""
        kw: dict[str, Any] = {}
        if self.timed_full:
            self._et = profiling.observer(self.bundle / "et.json")
            kw["execution_trace_observer"] = self._et
        self.prof = profile(activities=profiling.activities(torch.cuda.is_initialized()),
                            **self.timed_options(),
                            schedule=schedule(wait=0, warmup=1, active=self.steps, repeat=1),
                            on_trace_ready=self._on_trace_ready, **kw)
        self.warmup_done = count
        self._log_level = profiling.silence()  # no C++ warnings in the window
        profiling.start(self.prof)
        self.state = State.WARMUP

    def step(self, now: float, timing: StepTiming) -> None:
        """A boundary (at `now`) while the window is recorded (not WAITING, not DONE)."""
        if self.state is State.WARMUP:
            profiling.drain_gpu()  # timed steps start with no GPU backlog
            timing.read_gpu_marks()
            with quiet():
                self.prof.step()
            self.state = State.TIMED
            self._on_timed()
        elif self.state is State.TIMED:
            timing.timed_step(now)
            self.recorded += 1
            if self.recorded >= self.steps:
                self._end_timed()
                return
            with quiet():
                self.prof.step()
        elif self.state is State.GAP:
            if not self._start_detail():
                self._written()
            return
        elif self.state is State.DETAIL:
            profiling.drain_gpu()
            self._end_detail()
            self._written()
            return
        timing.t_last = time.perf_counter()

    def _written(self) -> None:
        self.state = State.DONE
        self._on_written()

    def _end_timed(self) -> None:
        profiling.drain_gpu()  # the timed steps' GPU work completes inside the trace
        with quiet():
            self.prof.step()  # RECORD_AND_SAVE -> NONE: stop and export
        self.close()
        if self.timed_full:
            self._written()
        else:
            # A profiler session started in the boundary that stopped the last one
            # (inside the same Optimizer.step range) can crash the interpreter at exit
            # (torch 2.15): one step in between.
            self.state = State.GAP

    def _on_trace_ready(self, prof: Any) -> None:
        profiling.export(prof, self.bundle / contract.TRACE)
        self.kept = "window"

    def _start_detail(self) -> bool:
        """Start the detail step's own session (everything on, the ET observer)."""
        try:
            self._et = profiling.observer(self.bundle / "et.json")
            self.prof = profile(activities=profiling.activities(torch.cuda.is_initialized()),
                                **profiling.detail_options(),
                                execution_trace_observer=self._et)
            profiling.start(self.prof)
            with quiet():
                self._detail_range = torch.profiler.record_function(
                    f"ProfilerStep#{self.steps + 1}")
                self._detail_range.__enter__()
        except Exception as e:  # noqa: BLE001 - the timed steps are written: keep them
            say(f"no detail step ({type(e).__name__}: {e})")
            self.close()
            return False
        self.state = State.DETAIL
        return True

    def _end_detail(self) -> None:
        """Stop the detail session, write its trace and its execution trace."""
        rng, self._detail_range = self._detail_range, None
        prof, self.prof = self.prof, None
        et, self._et = self._et, None
        try:
            with quiet():
                if rng is not None:
                    rng.__exit__(None, None, None)
                prof.__exit__(None, None, None)  # stop() + ET cleanup (closes et.json)
                if et is not None and et.is_registered:
                    et.unregister_callback()
            profiling.export(prof, self.bundle / contract.DETAIL)
            self.detail_kept = True
            et_json = self.bundle / "et.json"
            if et_json.exists():
                contract.gzip_to(et_json, self.bundle / contract.EXECUTION_TRACE)
        except Exception as e:  # noqa: BLE001
            say(f"could not write the detail step ({type(e).__name__}: {e})")
            contract.remove(self.bundle / "et.json")
        finally:
            profiling.unsilence(self._log_level)
            self._log_level = None

    def close(self) -> None:
        """Stop the timed session (it exports if it was recording) and, with
        ``TENSIGHT_TIMED=full``, finalize its execution trace."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        try:
            with quiet():
                prof.__exit__(None, None, None)  # stop() + ET cleanup (closes et.json)
                if self._et is not None and self._et.is_registered:
                    self._et.unregister_callback()
        finally:
            self._et = None
            if self.state is not State.DETAIL:
                profiling.unsilence(self._log_level)
                self._log_level = None
            et_json = self.bundle / "et.json"
            if et_json.exists() and self.timed_full and self.kept == "window":
                contract.gzip_to(et_json, self.bundle / contract.EXECUTION_TRACE)
            else:
                contract.remove(et_json)

    def drop(self, timing: StepTiming) -> bool:
        """Drop the window in progress (the program's own profiler starts, or an optimizer
        overrides forward steps): timed steps not yet written start over at a later
        boundary. True where the timed steps are written (the detail step, or the step
        before it): they are kept, without detail, and the window is DONE."""
        if self.state is State.GAP:
            self.state = State.DONE
            return True
        if self.prof is None or self.state not in (State.WARMUP, State.TIMED, State.DETAIL):
            return False
        detail = self.state is State.DETAIL
        self.prof.on_trace_ready = None
        self._detail_range = None
        try:
            self.close()
        except Exception:  # noqa: BLE001
            self.prof = None
        contract.remove(self.bundle / "et.json")
        if detail:
            self.state = State.DONE
            return True
        self.state = State.WAITING
        self.recorded = 0
        timing.profiled.clear()
        return False

    def finalize(self) -> None:
        """The program ends: stop the session that runs, keeping what it recorded."""
        if self.state is State.DETAIL:
            try:
                self._end_detail()
            except Exception as e:  # noqa: BLE001
                say(f"could not stop the profiler ({type(e).__name__}: {e})")
            self.state = State.DONE
        elif self.state is State.GAP:
            self.state = State.DONE
        elif self.state in (State.WARMUP, State.TIMED):
            try:
                self.close()  # RECORD -> stop_trace + export of the steps so far
            except Exception as e:  # noqa: BLE001
                say(f"could not stop the profiler ({type(e).__name__}: {e})")
            self.state = State.DONE
