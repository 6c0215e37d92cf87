"""The collector: records a bundle from inside the user's (unmodified) program.

Runs in the user's interpreter, so it stays small and never prints to stdout. Under
``tensight run`` it is installed by ``_boot/sitecustomize.py`` right after ``torch`` is
imported (:func:`install_from_env`); ``tensight.profile_model`` and ``tensight.profile``
use the same :class:`Collector` in-process. Its parts: :mod:`tensight.steps` (where a
step ends), :mod:`tensight.loops` (the step loop of a program without optimizer or
module), :mod:`tensight.profiling` (profiler options and quiet starts),
:mod:`tensight.bundle` (the manifest and file names), :mod:`tensight.hardware` (the
second run under Nsight Compute).

The window (:class:`State`), counted in steps: steps 1..W (``TENSIGHT_WARMUP``; W=0
acts as W=1) run unprofiled and are timed (host clock and CUDA events); step W+1 is the
profiler's warm-up; steps W+2..W+N+1 are the N (``TENSIGHT_STEPS``) timed steps,
``ProfilerStep#1..N`` of ``trace.json.gz``, recorded lean (:data:`profiling.TIMED`: no
stacks, shapes or allocator events, whose per-op cost would slow a busy host); step
W+N+2 is the detail step, ``ProfilerStep#N+1`` of ``detail.json.gz``, recorded in a
profiler session of its own with everything on and the execution-trace observer (~40 µs
per op). The GPU is drained at each edge. ``TENSIGHT_TIMED=full`` records the timed
steps with everything on instead (as the detail step; no detail step then). While a
DataLoader still hands out what its workers prefetched (:mod:`tensight.prefetch`), the
warm-up goes on (steps on ready batches do not show what loading costs).

Until the first step boundary a *speculative* profile runs, kept in memory only in case
no window gets recorded — a program with no steps, or one that ends or crashes before
its window — and then written as ``whole_program``. It starts at the program's own
first CUDA use (``torch.cuda``'s lazy init; starting Kineto earlier would query the
device count and freeze ``CUDA_VISIBLE_DEVICES`` before the program sets it), or, where
no GPU can be there, at ``torch`` import with the CPU only and no stacks. For loop
detection its ops say which loop holds the work. ``TENSIGHT_SPECULATE=0`` turns it off
(troubleshooting).

A rank of a distributed job (:mod:`tensight.ranks`: ``RANK`` in the environment, as
torchrun sets it) records into ``TENSIGHT_BUNDLE/rank{RANK}/`` and its manifest names it
(``distributed``). Its window depends only on the step count, as every rank's does, so
SPMD ranks record the same step indices: the DataLoader-prefetch extension of the warm-up
(which depends on each rank's timing) is off there, and the collector calls no
collective (its profiler starts and stops at each rank's own boundaries).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.profiler import profile, schedule

from tensight import bundle as contract
from tensight import prefetch, profiling, ranks
from tensight.exits import ProgramEnd
from tensight.loops import Loop
from tensight.profiling import quiet, say
from tensight.steps import Mode, StepFinder

if TYPE_CHECKING:
    from tensight.hardware import HardwareCollector

__all__ = ["Collector", "State", "install_from_env"]

_active: Collector | None = None  # at most one collector per process


class State(Enum):
    """Where the recording window is."""

    WAITING = "waiting"  # warm-up steps, unprofiled
    WARMUP = "warmup"  # the profiler's warm-up step
    TIMED = "timed"  # the N timed steps
    GAP = "gap"  # one unprofiled step between the two sessions
    DETAIL = "detail"  # the detail step
    DONE = "done"


class Collector:
    """Finds steps, runs the profiler over the window, writes the bundle.

    `auto`: find steps with global hooks (else call :meth:`boundary` after each step and
    pass `detection`). `speculate`: profile from :meth:`install` until the first boundary,
    kept as the whole-program fallback. `stop`: exit the program once the window is
    written (``TENSIGHT_STOP=1``). `timed_full`: the timed steps with every option on.
    `distributed`: the job's rank this process is (its window then depends on the step
    count only)."""

    def __init__(self, bundle: str | os.PathLike[str], steps: int, warmup: int, *,
                 stop: bool = False, auto: bool = True, speculate: bool = True,
                 light_start: bool = False, detection: str | None = None,
                 timed_full: bool = False, loops: bool = True,
                 distributed: contract.Distributed | None = None) -> None:
        self.bundle = Path(bundle).resolve()
        self.steps = max(1, int(steps))
        self.warmup = max(0, int(warmup))
        self.stop = stop
        self.auto = auto
        self.speculate = speculate
        self.light_start = light_start
        self.timed_full = timed_full
        self.distributed = distributed
        self.enabled = True
        self.command = list(sys.argv)
        self.cwd = os.getcwd()
        self.finder = StepFinder(self._on_boundary, self._on_switch, self._choose_loop,
                                 auto=auto, mode=Mode(detection) if detection else None,
                                 loops=loops, on_loop_end=self._on_loop_end)
        self.finder.on_error = self._fail
        # step counting and timing
        self.count = 0  # boundaries passed in the current mode
        self.first_index = 0  # the program iteration that boundary 1 ends (0-based)
        self.recorded = 0
        self.warmup_done = 0
        self.t_last: float | None = None
        self.ms_unprofiled: list[float] = []
        self.ms_profiled: list[float] = []
        # CUDA events at the warm-up boundaries: the unprofiled step time as the GPU saw
        # it (the host clock runs ahead of a GPU-bound program's queue)
        self._gpu_marks: list[Any] = []
        self.ms_unprofiled_gpu: list[float] = []
        # profilers
        self.state = State.WAITING
        self.prof: Any = None  # the timed session, then the detail session
        self._detail_range: Any = None
        self._et: Any = None
        self.spec: Any = None  # speculative profile (running or stopped and kept)
        self.spec_running = False
        self.spec_full = False
        self.spec_tid: int | None = None
        self._spec_started = False
        self.kept: str | None = None  # "window" | "whole_program" once written
        self.detail_kept = False
        self.finished = False
        self._lock = threading.RLock()
        self._window_log_level: int | None = None
        self._told_busy = False
        self.prefetch_hold = prefetch.Hold(self.warmup, distributed is not None)
        self.program_end = ProgramEnd(self.finish, self._recording, self.bundle)
        # A window written from a loop's steps is provisional until the loop has run as
        # many more steps (`_confirm_at`, a count of boundaries): a loop that ends before
        # that may only have set things up (a benchmark's data built in a loop before the
        # timed one). Its window is then set aside (`_aside`) and the watch goes on: a
        # later loop's window replaces it; if none comes, it is put back at the end.
        self._confirm_at: int | None = None
        self._aside: dict[str, Any] | None = None
        self._window_mode: Mode | None = None  # the steps the written window holds
        self._window_loop: Loop | None = None

    # ---- lifecycle -------------------------------------------------------------------

    def install(self) -> None:
        """Start: hooks (auto), speculative profile, first manifest."""
        global _active
        if _active is not None and _active is not self:
            say("another tensight collector was active in this process: its recording is dropped")
            _active.abandon()
        _active = self
        profiling.watch_program_profilers(_yield_to_program)
        try:
            prefetch.install()
        except Exception as e:  # noqa: BLE001 - a torch without the private class
            say(f"DataLoader prefetch not followed ({type(e).__name__}: {e})")
        self.bundle.mkdir(parents=True, exist_ok=True)
        off = self.finder.install()
        if off:
            say(f"no loop detection ({off}): steps come from optimizer or module calls")
        if self.speculate:
            if torch.cuda.is_initialized() or not self.light_start:
                self._start_spec(True)
            else:
                # Kineto queries the CUDA device count when it starts, which would freeze
                # CUDA_VISIBLE_DEVICES before the program sets it: with a GPU around, wait
                # for the program's own first CUDA use (torch.cuda's lazy init).
                if not profiling.gpu_present():
                    self._start_spec(False)
                if torch.version.cuda is not None or torch.version.hip is not None:
                    try:
                        torch.cuda._lazy_call(self._on_cuda_init)
                    except Exception:  # noqa: BLE001 - private API: no upgrade then
                        pass
        else:
            self.t_last = time.perf_counter()
            if not self.auto and self.warmup == 0:
                self._start_timed()
        self.write_manifest("running", None, None)

    def abandon(self) -> None:
        """Drop everything (another collector takes over)."""
        global _active
        self.enabled = self.finder.enabled = False
        self.finder.remove()
        prefetch.uninstall()
        self._drop_window()
        self._stop_spec()
        self.spec = None
        if _active is self:
            _active = None

    def _fail(self, e: BaseException) -> None:
        """Give up: no hooks, and nothing half-recorded is written."""
        say(f"collector error ({type(e).__name__}: {e}); the program runs on unprofiled")
        self.enabled = self.finder.enabled = False
        self.finder.remove()
        for drop in (self._drop_window, self._discard_spec):
            try:
                drop()
            except Exception:  # noqa: BLE001
                pass

    def yield_to_program(self) -> None:
        """The program starts a torch.profiler of its own: stop ours first (two Kineto
        sessions cancel each other). The speculative profile is kept; a window in progress
        is dropped and starts again at a boundary after the program's profiler ends."""
        with self._lock:
            if not self.enabled or not (self.spec_running or self.prof is not None):
                return
            if not self._told_busy:
                say("the program starts torch.profiler itself: tensight pauses until it ends")
                self._told_busy = True
            self._stop_spec()
            self._drop_window()

    # ---- step detection (the finder's callbacks) ---------------------------------------

    def _on_boundary(self) -> None:
        with self._lock:
            self._boundary()

    def _on_switch(self, old: Mode, new: Mode) -> bool:
        """An optimizer stepped after forward or loop steps, or a step loop was chosen
        after forward steps: start over with the new kind of steps, unless a window of
        the old kind is written already (then keep it)."""
        with self._lock:
            if self.state is State.DONE:
                return False
            self._drop_window()
            self.count = 0
            if new is not Mode.LOOP:  # a loop's first step was set when it was chosen
                self.first_index = 0
            self.warmup_done = 0
            self.ms_unprofiled.clear()
            self._gpu_marks.clear()
            self.t_last = None
            return True

    def _on_loop_end(self, loop: Loop) -> None:
        """The program left the step loop before the window was written (it only set
        things up): drop what was recorded with it and watch for the next loop."""
        with self._lock:
            if not self.enabled:
                return
            if self.state is State.DONE:
                if self._confirm_at is None:
                    return
                say(f"the loop at {loop.where} ended after {self.count} steps, soon after "
                    "its window: keeping that window while looking for a loop that runs "
                    "longer")
                self._set_aside()
                self.count = 0
                self.warmup_done = 0
                self._gpu_marks.clear()
                self.t_last = None
                return
            say(f"the loop at {loop.where} ended after {self.count} steps: looking for "
                "another")
            self._drop_window()
            self.count = 0
            self.warmup_done = 0
            self.ms_unprofiled.clear()
            self._gpu_marks.clear()
            self.t_last = None
            if self.speculate and not self.spec_running:
                cuda = profiling.cuda_ready()
                if cuda or not profiling.gpu_present():
                    self.spec = None
                    self._start_spec(cuda)

    def _choose_loop(self, chain: list[Loop]) -> Loop | None:
        """Which of `chain` (innermost first) is the step loop: the engine's choice over
        the ops the speculative profile recorded inside each loop's iterations."""
        with self._lock:
            # After forward steps (the speculative profile ended at the first): only
            # before their window, and with no profile to weigh the loops by.
            forward = self.mode is Mode.FORWARD
            if not self.enabled or self.state is not State.WAITING or \
                    (self.count and not forward):
                return None
            try:
                from tensight import _native

                choose = _native.choose_loop
            except (ImportError, AttributeError) as e:
                say(f"no loop detection (tensight._native: {e})")
                return None
            if profiling.gpu_present() and not profiling.cuda_ready():
                return None  # a loop before the program's first GPU use only sets up
            restart = self.spec_running and not forward
            if restart and self.spec_tid != threading.get_ident():
                return None
            if not forward:
                self._stop_spec()
            times = profiling.op_start_times(self.spec) \
                if self.spec is not None and not forward else None
            now = time.time_ns()
            outer_first = list(reversed(chain))
            cands = []
            for depth, lp in enumerate(outer_first):
                first, last = lp.ends[0], lp.ends[-1]
                if times is None:
                    share = 1.0
                else:
                    inside = _count(times, first, last)
                    share = inside / max(1, _count(times, first, now)) if inside else 0.0
                cands.append((depth, lp.count - 1, last - first, last - first, share))
            i = choose(cands)
            if i is None:
                if restart:  # keep a fallback profile running from here
                    self.spec = None
                    self._start_spec(True)
                return None
            lp = outer_first[i]
            say(f"steps are the iterations of the loop at {lp.where}")
            self.first_index = lp.count
            return lp

    # ---- the window ------------------------------------------------------------------

    def boundary(self) -> None:
        """End of a step (manual mode; the hooks call this too)."""
        with self._lock:
            self._boundary()

    @property
    def mode(self) -> Mode | None:
        return self.finder.mode

    def _boundary(self) -> None:
        now = time.perf_counter()
        self.count += 1
        if self.state is State.DONE:  # a provisional window's loop goes on
            if self._confirm_at is not None and self.count >= self._confirm_at:
                self._confirmed()
            return
        self._rank()  # the backend, while the program's process group is up
        if self.spec_running:
            if self.spec_tid != threading.get_ident():
                say("steps run in another thread than the one that imported torch: "
                    "recording the whole program instead")
                self.enabled = self.finder.enabled = False
                self.finder.remove()
                return
            self._stop_spec()
        if self.state is State.WAITING:
            learned = self.finder.learned
            draining = self.prefetch_hold.waits(self.count, self.t_last)
            if draining:  # steps on prefetched batches are not the steady state: untimed
                self.ms_unprofiled.clear()
                self._gpu_marks.clear()
            elif self.t_last is not None and learned:
                self.ms_unprofiled.append((now - self.t_last) * 1e3)
            if learned:
                self._gpu_mark()
            if (self.count >= self.warmup and not draining and not self.finder.forward_waits()
                    and (len(self.ms_unprofiled) >= self.prefetch_hold.timed_after_drain
                         or not learned)):
                self._start_timed()
        elif self.state is State.WARMUP:
            profiling.drain_gpu()  # timed steps start with no GPU backlog
            self._read_gpu_marks()
            with quiet():
                self.prof.step()
            self.state = State.TIMED
            say(f"recording {self.steps} steps ({self.mode.value if self.mode else '?'} steps "
                f"{self.count + 1}..{self.count + self.steps}; {self.warmup_done} warm-up + 1 "
                "profiler warm-up before)")
        elif self.state is State.TIMED:
            if self.t_last is not None:
                self.ms_profiled.append((now - self.t_last) * 1e3)
            self.recorded += 1
            if self.recorded >= self.steps:
                profiling.drain_gpu()  # the timed steps' GPU work completes inside the trace
                with quiet():
                    self.prof.step()  # RECORD_AND_SAVE -> NONE: stop and export
                self._close_prof()
                if self.timed_full:
                    self._finish_window()
                else:
                    # A profiler session started in the boundary that stopped the last
                    # one (inside the same Optimizer.step range) can crash the
                    # interpreter at exit (torch 2.15): one step in between.
                    self.state = State.GAP
                return
            with quiet():
                self.prof.step()
        elif self.state is State.GAP:
            if not self._start_detail():
                self._finish_window()
            return
        elif self.state is State.DETAIL:
            profiling.drain_gpu()
            self._end_detail()
            self._finish_window()
            return
        self.t_last = time.perf_counter()

    def _gpu_mark(self) -> None:
        """A CUDA event at this warm-up boundary (a few µs; never a sync)."""
        try:
            if profiling.cuda_ready():
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                self._gpu_marks.append(ev)
        except Exception:  # noqa: BLE001 - a measurement never breaks the program
            self._gpu_marks.clear()

    def _read_gpu_marks(self) -> None:
        """After the drain at the window's start: the warm-up steps' GPU-timed periods."""
        try:
            marks = self._gpu_marks
            self.ms_unprofiled_gpu = [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
        except Exception:  # noqa: BLE001
            self.ms_unprofiled_gpu = []
        self._gpu_marks = []

    def _timed_options(self) -> dict[str, Any]:
        return profiling.detail_options() if self.timed_full else dict(profiling.TIMED)

    def _start_timed(self) -> None:
        if profiling.profiler_running():  # the program profiles itself
            if not self._told_busy:
                say("the program runs torch.profiler itself: the window waits for it to end")
                self._told_busy = True
            return  # try again at the next boundary
        kw: dict[str, Any] = {}
        if self.timed_full:
            self._et = profiling.observer(self.bundle / "et.json")
            kw["execution_trace_observer"] = self._et
        self.prof = profile(activities=profiling.activities(torch.cuda.is_initialized()),
                            **self._timed_options(),
                            schedule=schedule(wait=0, warmup=1, active=self.steps, repeat=1),
                            on_trace_ready=self._on_trace_ready, **kw)
        self.warmup_done = self.count
        self._window_log_level = profiling.silence()  # no C++ warnings in the window
        profiling.start(self.prof)
        self.state = State.WARMUP

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
            self._close_prof()
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
            profiling.unsilence(self._window_log_level)
            self._window_log_level = None

    def _finish_window(self) -> None:
        """The window is written: the manifest, and stop the program if asked. A window
        of a loop's steps waits for the loop to go on as long again (`_confirmed`)."""
        self.state = State.DONE
        self._window_mode, self._window_loop = self.mode, self.finder.loop
        provisional = self.mode is Mode.LOOP and self.finder.loop is not None
        if provisional:
            self._confirm_at = 2 * self.count
        else:
            self.finder.remove()
        self.spec = None  # the fallback is not needed any more
        contract.remove(self.bundle / "et.spec.json")
        say(f"recorded {self.recorded} {self.mode.value if self.mode else ''} steps"
            f"{' and a detail step' if self.detail_kept else ''}")
        self._drop_aside()  # an earlier loop's window, set aside: this one replaces it
        self.write_manifest("running", None, None)
        if self.stop and not provisional:
            self.finish("completed", 0, None)
            profiling.stop_program()

    def _confirmed(self) -> None:
        """The window's loop went on as long again: it is the step loop."""
        self._confirm_at = None
        self.finder.remove()
        if self.stop:
            self.finish("completed", 0, None)
            profiling.stop_program()

    _ASIDE_FILES = (contract.TRACE, contract.DETAIL, contract.EXECUTION_TRACE)

    def _set_aside(self) -> None:
        """Keep the written window (files renamed, its facts saved) and start over."""
        self._drop_aside()
        for name in self._ASIDE_FILES:
            f = self.bundle / name
            if f.exists():
                f.replace(self.bundle / (name + ".aside"))
        self._aside = {k: getattr(self, k) for k in (
            "kept", "detail_kept", "recorded", "first_index", "warmup_done", "ms_unprofiled",
            "ms_unprofiled_gpu", "ms_profiled", "_window_mode", "_window_loop")}
        self.kept, self.detail_kept, self.recorded = None, False, 0
        self._window_mode = self._window_loop = None
        self.ms_unprofiled, self.ms_unprofiled_gpu, self.ms_profiled = [], [], []
        self._confirm_at = None
        self.state = State.WAITING

    def _drop_aside(self) -> None:
        if self._aside is None:
            return
        self._aside = None
        for name in self._ASIDE_FILES:
            contract.remove(self.bundle / (name + ".aside"))

    def _restore_aside(self) -> None:
        """The program ended before a later loop's window was written: the set-aside
        window is the recording."""
        aside, self._aside = self._aside, None
        if aside is None:
            return
        self._drop_window()
        for name in self._ASIDE_FILES:
            f = self.bundle / (name + ".aside")
            if f.exists():
                f.replace(self.bundle / name)
        for k, v in aside.items():
            setattr(self, k, v)
        self.state = State.DONE

    def _close_prof(self) -> None:
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
                profiling.unsilence(self._window_log_level)
                self._window_log_level = None
            et_json = self.bundle / "et.json"
            if et_json.exists() and self.timed_full and self.kept == "window":
                contract.gzip_to(et_json, self.bundle / contract.EXECUTION_TRACE)
            else:
                contract.remove(et_json)

    def _drop_window(self) -> None:
        """Drop a window in progress (the program's own profiler starts, or an optimizer
        overrides forward steps): timed steps not yet written start over at a later
        boundary; during the detail step the timed steps are kept, without detail."""
        if self.state is State.GAP:
            self.state = State.DONE
            self.finder.remove()
            self.write_manifest("running", None, None)
            return
        if self.prof is None or self.state not in (State.WARMUP, State.TIMED, State.DETAIL):
            return
        detail = self.state is State.DETAIL
        self.prof.on_trace_ready = None
        self._detail_range = None
        try:
            self._close_prof()
        except Exception:  # noqa: BLE001
            self.prof = None
        contract.remove(self.bundle / "et.json")
        if detail:
            self.state = State.DONE
            self.finder.remove()
            self.write_manifest("running", None, None)
            return
        self.state = State.WAITING
        self.recorded = 0
        self.ms_profiled.clear()

    # ---- the speculative whole-program profile ---------------------------------------

    def _start_spec(self, full: bool, cuda: bool | None = None) -> None:
        if profiling.profiler_running():
            return
        et = profiling.observer(self.bundle / "et.spec.json")
        opts = dict(profiling.FULL if full else profiling.LIGHT)
        use_cuda = full and (torch.cuda.is_initialized() if cuda is None else cuda)
        self.spec = profile(activities=profiling.activities(use_cuda), **opts,
                            execution_trace_observer=et)
        profiling.start(self.spec)
        self.spec_running = True
        self._spec_started = True
        self.spec_full = full
        self.spec_tid = threading.get_ident()

    def _on_cuda_init(self) -> None:
        """CUDA initialized (lazily, by the program): start the speculative profile with
        CUDA and stacks, replacing a light one (same thread) if any."""
        try:
            with self._lock:
                if not self.enabled or self.count or self.mode is not None or self.spec_full:
                    return
                if self.spec_running:
                    if self.spec_tid != threading.get_ident():
                        return
                    self._stop_spec()
                    self.spec = None
                self._start_spec(True, cuda=True)  # torch.cuda.is_initialized() is still False
        except Exception:  # noqa: BLE001 - must never raise inside torch.cuda._lazy_init
            pass

    def _stop_spec(self) -> None:
        if self.spec is not None and self.spec_running:
            self.spec_running = False
            try:
                with quiet():
                    self.spec.__exit__(None, None, None)  # keep its results in memory
            except Exception:  # noqa: BLE001 - e.g. the program's own torch.profiler took over
                self._discard_spec()

    def _discard_spec(self) -> None:
        spec, self.spec = self.spec, None
        self.spec_running = False
        et = getattr(spec, "execution_trace_observer", None)
        if et is not None and et.is_registered:
            with quiet():
                et.unregister_callback()
        contract.remove(self.bundle / "et.spec.json")

    # ---- the end ---------------------------------------------------------------------

    def finish(self, status: str, exit_code: int | None, error: str | None) -> None:
        """Stop what runs, keep what was recorded, write the manifest (idempotent). A
        SIGTERM/SIGHUP that comes meanwhile (torchrun ends a rank that is already
        ending after another rank failed) waits until the bundle is written, then ends
        the process as it would have."""
        global _active
        with self._lock:
            if not self.finished:
                self.finished = True
                self.program_end.finishing = True
                try:
                    self.enabled = self.finder.enabled = False
                    self.finder.remove()
                    prefetch.uninstall()
                    if self._aside is not None and self.kept is None:
                        self._restore_aside()
                    self._drop_aside()
                    self._finalize_recording()
                    if _active is self:
                        _active = None
                    self.write_manifest(status, exit_code, error)
                finally:
                    self.program_end.finishing = False
            else:
                self.write_manifest(status, exit_code, error)
        self.program_end.end_pending()

    def _finalize_recording(self) -> None:
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
                self._close_prof()  # RECORD -> stop_trace + export of the steps so far
            except Exception as e:  # noqa: BLE001
                say(f"could not stop the profiler ({type(e).__name__}: {e})")
            self.state = State.DONE
        if self.kept is not None:
            return
        try:
            self._stop_spec()
        except Exception as e:  # noqa: BLE001
            say(f"could not stop the profiler ({type(e).__name__}: {e})")
            self.spec = None
        if self.spec is None:
            if not (self.auto and self.speculate):
                pass
            elif self.mode is not None:
                say(f"nothing was recorded: the program ended after {self.count} "
                    f"{self.mode.value} steps, before the window ({self.warmup} warm-up + 1 + "
                    f"{self.steps})")
            elif not self._spec_started:
                say("no steps found and the program never used CUDA: nothing was recorded")
            else:
                say("no steps found, and the whole-program profile was lost: nothing recorded")
            return
        if self.mode is not None:
            say(f"the program ended after {self.count} {self.mode.value} steps, before the "
                f"window ({self.warmup} warm-up + 1 + {self.steps}): keeping the profile "
                "from torch import to the first step")
        else:
            say("no steps found (no optimizer, module or repeating loop): recorded the "
                "whole program")
        try:
            profiling.export(self.spec, self.bundle / contract.TRACE)
            self.kept = "whole_program"
            et = self.bundle / "et.spec.json"
            if et.exists():
                contract.gzip_to(et, self.bundle / contract.EXECUTION_TRACE)
        except Exception as e:  # noqa: BLE001
            say(f"could not write the trace ({type(e).__name__}: {e})")
        self.spec = None

    def manifest(self, status: str, exit_code: int | None, error: str | None) -> contract.Manifest:
        whole = self.kept == "whole_program" or (self.kept is None and self.mode is None)
        window = self.kept == "window"
        et_ok = (self.bundle / contract.EXECUTION_TRACE).exists()
        loop = self._window_loop if window else self.finder.loop
        mode = self._window_mode if window and self._window_mode else self.mode
        spec_opts = profiling.FULL if self.spec_full else profiling.LIGHT
        return contract.Manifest(
            tensight_version=_tensight_version(),
            python_version=platform.python_version(),
            torch_version=str(torch.__version__),
            cuda_version=torch.version.cuda,
            device=_device(),
            command=self.command,
            cwd=self.cwd,
            step_detection="whole_program" if whole else (mode.value if mode else "?"),
            step_loop=loop.describe() if loop is not None and not whole else None,
            warmup_steps=0 if whole else self.warmup_done,
            steps_requested=self.steps,
            steps_recorded=self.recorded if window else 0,
            detail_step=self.steps + 1 if window and self.detail_kept else None,
            first_step_index=None if whole else self.first_index,
            options={"timed": dict(spec_opts) if whole else self._timed_options(),
                     "detail": profiling.detail_options() if self.detail_kept else None,
                     "hardware": False},
            program=contract.Program(status, exit_code, error),
            files=contract.Files(
                trace=contract.TRACE if self.kept else None,
                detail=contract.DETAIL if window and self.detail_kept else None,
                execution_trace=contract.EXECUTION_TRACE if self.kept and et_ok else None),
            timing=contract.Timing([round(x, 3) for x in self.ms_unprofiled],
                                   [round(x, 3) for x in self.ms_unprofiled_gpu],
                                   [round(x, 3) for x in self.ms_profiled]),
            distributed=self._rank(),
        )

    def _rank(self) -> contract.Distributed | None:
        """This rank, with what torch.distributed says now (kept: it may be destroyed
        before the last manifest)."""
        if self.distributed is not None and self.distributed.backend is None:
            self.distributed = ranks.with_backend(self.distributed)
        return self.distributed

    def write_manifest(self, status: str, exit_code: int | None, error: str | None) -> None:
        try:
            self.manifest(status, exit_code, error).write(self.bundle)
        except Exception as e:  # noqa: BLE001
            say(f"could not write the manifest ({type(e).__name__}: {e})")

    def install_exit_handlers(self) -> None:
        """Note how the program ends, without changing it (only under `tensight run`):
        :class:`tensight.exits.ProgramEnd` finishes the bundle then."""
        self.program_end.install()

    def _recording(self) -> str | None:
        """What the profiler was recording now (None: nothing)."""
        if self.spec_running:
            return "the whole program (no step found yet)"
        if self.state in (State.WARMUP, State.TIMED, State.GAP, State.DETAIL):
            return f"the window ({self.state.value} step)"
        return None


def _count(times: list[int], lo: int, hi: int) -> int:
    import bisect

    return bisect.bisect_right(times, hi) - bisect.bisect_left(times, lo)


def _yield_to_program() -> None:
    if _active is not None:
        _active.yield_to_program()


def _forked_child() -> None:
    """A forked child (a DataLoader worker) records nothing."""
    if _active is not None:
        _active.enabled = _active.finder.enabled = False
        if _active.finder.loop_watch is not None:
            _active.finder.loop_watch.stop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def _device() -> contract.Device | None:
    """The current CUDA device, if the program initialized CUDA (never initialize it)."""
    try:
        if not torch.cuda.is_initialized():
            return None
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return contract.Device(p.name, int(p.total_memory), [int(p.major), int(p.minor)],
                               int(p.multi_processor_count))
    except Exception:  # noqa: BLE001
        return None


def _tensight_version() -> str:
    try:
        from tensight import _native

        return str(_native.version())
    except Exception:  # noqa: BLE001
        return "unknown"


def env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    value = int(raw)  # ValueError -> reported by the boot hook
    if value < minimum:
        raise ValueError(f"{name}={raw} is below {minimum}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "") or default
    if value not in choices:
        raise ValueError(f"{name}={value} (one of {', '.join(choices)})")
    return value


def install_from_env() -> Collector | HardwareCollector:
    """Install the collector described by the TENSIGHT_* environment (``tensight run``)."""
    if os.environ.get("TENSIGHT_HARDWARE") == "1":
        from tensight.hardware import install_from_env as install_hardware

        return install_hardware()
    rank = ranks.from_env()
    bundle = Path(os.environ["TENSIGHT_BUNDLE"])
    if rank is not None:
        bundle = ranks.rank_dir(bundle, rank)
        profiling.label(f"rank {rank.rank}")
    c = Collector(
        bundle,
        steps=env_int("TENSIGHT_STEPS", 5, 1),
        warmup=env_int("TENSIGHT_WARMUP", 3, 0),
        stop=os.environ.get("TENSIGHT_STOP", "0") == "1",
        auto=True,
        speculate=os.environ.get("TENSIGHT_SPECULATE", "1") != "0",
        light_start=True,
        timed_full=env_choice("TENSIGHT_TIMED", "lean", ("lean", "full")) == "full",
        loops=os.environ.get("TENSIGHT_LOOPS", "1") != "0",
        distributed=rank,
    )
    c.install()
    c.install_exit_handlers()
    return c
