"""The collector: records a bundle from inside the user's (unmodified) program.

Runs in the user's interpreter, so it stays small and never prints to stdout. Under
``tensight run`` it is installed by ``_boot/sitecustomize.py`` right after ``torch`` is
imported (:func:`install_from_env`); ``tensight.profile_model`` and ``tensight.profile``
use the same :class:`Collector` in-process. Its parts: :mod:`tensight.steps` (where a
step ends), :mod:`tensight.loops` (the step loop of a program without optimizer or
module), :mod:`tensight.window` (the window's profiler sessions),
:mod:`tensight.speculative` (the profile before the first step),
:mod:`tensight.provisional` (a loop's window until the loop goes on),
:mod:`tensight.timing` (step times), :mod:`tensight.prefetch` (the DataLoader's
prefetch), :mod:`tensight.profiling` (profiler options and quiet starts),
:mod:`tensight.manifest` and :mod:`tensight.bundle` (the manifest and file names),
:mod:`tensight.exits` (how the program ends), :mod:`tensight.hardware` (the second run
under Nsight Compute).

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
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tensight import bundle as contract
from tensight import prefetch, profiling, ranks, speculative
from tensight.exits import ProgramEnd
from tensight.loops import Loop
from tensight.manifest import build_manifest
from tensight.profiling import say
from tensight.provisional import Aside, Provisional
from tensight.speculative import Speculative
from tensight.steps import Mode, StepFinder
from tensight.timing import StepTiming
from tensight.window import State, Window

if TYPE_CHECKING:
    from tensight.hardware import HardwareCollector

__all__ = ["Collector", "State", "install_from_env"]

_active: Collector | None = None  # at most one collector per process


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
        self.count = 0  # boundaries passed in the current mode
        self.first_index = 0  # the program iteration that boundary 1 ends (0-based)
        self.timing = StepTiming()
        self.window = self._new_window()
        self.spec = Speculative(self.bundle)  # running or stopped and kept
        self.provisional = Provisional(self.bundle)
        self.prefetch_hold = prefetch.Hold(self.warmup, distributed is not None)
        self.program_end = ProgramEnd(self.finish, self._recording, self.bundle)
        self.finished = False
        self._lock = threading.RLock()
        self._told_busy = False

    def _new_window(self) -> Window:
        return Window(self.bundle, self.steps, self.timed_full, self._say_recording,
                      self._finish_window)

    @property
    def mode(self) -> Mode | None:
        return self.finder.mode

    @property
    def state(self) -> State:
        return self.window.state

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
                self.spec.start(True)
            else:
                # Kineto queries the CUDA device count when it starts, which would freeze
                # CUDA_VISIBLE_DEVICES before the program sets it: with a GPU around, wait
                # for the program's own first CUDA use (torch.cuda's lazy init).
                if not profiling.gpu_present():
                    self.spec.start(False)
                if torch.version.cuda is not None or torch.version.hip is not None:
                    try:
                        torch.cuda._lazy_call(self._on_cuda_init)
                    except Exception:  # noqa: BLE001 - private API: no upgrade then
                        pass
        else:
            self.timing.t_last = time.perf_counter()
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
        self.spec.stop()
        self.spec.prof = None
        if _active is self:
            _active = None

    def _fail(self, e: BaseException) -> None:
        """Give up: no hooks, and nothing half-recorded is written."""
        say(f"collector error ({type(e).__name__}: {e}); the program runs on unprofiled")
        self.enabled = self.finder.enabled = False
        self.finder.remove()
        for drop in (self._drop_window, self.spec.discard):
            try:
                drop()
            except Exception:  # noqa: BLE001
                pass

    def yield_to_program(self) -> None:
        """The program starts a torch.profiler of its own: stop ours first (two Kineto
        sessions cancel each other). The speculative profile is kept; a window in progress
        is dropped and starts again at a boundary after the program's profiler ends."""
        with self._lock:
            if not self.enabled or not (self.spec.running or self.window.prof is not None):
                return
            if not self._told_busy:
                say("the program starts torch.profiler itself: tensight pauses until it ends")
                self._told_busy = True
            self.spec.stop()
            self._drop_window()

    def _on_cuda_init(self) -> None:
        """CUDA initialized (lazily, by the program): start the speculative profile with
        CUDA and stacks, replacing a light one (same thread) if any."""
        try:
            with self._lock:
                if not self.enabled or self.count or self.mode is not None or self.spec.full:
                    return
                self.spec.on_cuda_init()
        except Exception:  # noqa: BLE001 - must never raise inside torch.cuda._lazy_init
            pass

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
            self.window.warmup_done = 0
            self.timing.restart()
            return True

    def _on_loop_end(self, loop: Loop) -> None:
        """The program left the step loop before the window was written (it only set
        things up): drop what was recorded with it and watch for the next loop."""
        with self._lock:
            if not self.enabled:
                return
            if self.state is State.DONE:
                if self.provisional.confirm_at is None:
                    return
                say(f"the loop at {loop.where} ended after {self.count} steps, soon after "
                    "its window: keeping that window while looking for a loop that runs "
                    "longer")
                self._set_aside()
                self.count = 0
                return
            say(f"the loop at {loop.where} ended after {self.count} steps: looking for "
                "another")
            self._drop_window()
            self.count = 0
            self.window.warmup_done = 0
            self.timing.restart()
            if self.speculate and not self.spec.running:
                cuda = profiling.cuda_ready()
                if cuda or not profiling.gpu_present():
                    self.spec.restart(cuda)

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
            restart = self.spec.running and not forward
            if restart and self.spec.tid != threading.get_ident():
                return None
            if not forward:
                self.spec.stop()
            times = self.spec.op_start_times() if not forward else None
            outer_first = list(reversed(chain))
            i = choose(speculative.candidates(outer_first, times, time.time_ns()))
            if i is None:
                if restart:  # keep a fallback profile running from here
                    self.spec.restart(True)
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

    def _boundary(self) -> None:
        now = time.perf_counter()
        self.count += 1
        if self.state is State.DONE:  # a provisional window's loop goes on
            if self.provisional.confirmed(self.count):
                self._confirmed()
            return
        self._rank()  # the backend, while the program's process group is up
        if self.spec.running:
            if self.spec.tid != threading.get_ident():
                say("steps run in another thread than the one that imported torch: "
                    "recording the whole program instead")
                self.enabled = self.finder.enabled = False
                self.finder.remove()
                return
            self.spec.stop()
        if self.state is State.WAITING:
            self._warmup_step(now)
            self.timing.t_last = time.perf_counter()
        else:
            self.window.step(now, self.timing)

    def _warmup_step(self, now: float) -> None:
        """A boundary before the window: time it; start the window once the warm-up is
        done (and the DataLoader's prefetch drained, and forward steps decided)."""
        learned = self.finder.learned
        draining = self.prefetch_hold.waits(self.count, self.timing.t_last)
        self.timing.warmup_step(now, learned, draining)
        if (self.count >= self.warmup and not draining and not self.finder.forward_waits()
                and (len(self.timing.unprofiled) >= self.prefetch_hold.timed_after_drain
                     or not learned)):
            self._start_timed()

    def _start_timed(self) -> None:
        if profiling.profiler_running():  # the program profiles itself
            if not self._told_busy:
                say("the program runs torch.profiler itself: the window waits for it to end")
                self._told_busy = True
            return  # try again at the next boundary
        self.window.start_timed(self.count)

    def _say_recording(self) -> None:
        say(f"recording {self.steps} steps ({self.mode.value if self.mode else '?'} steps "
            f"{self.count + 1}..{self.count + self.steps}; {self.window.warmup_done} warm-up "
            "+ 1 profiler warm-up before)")

    def _recording(self) -> str | None:
        """What the profiler was recording now (None: nothing)."""
        if self.spec.running:
            return "the whole program (no step found yet)"
        return self.window.recording()

    def _finish_window(self) -> None:
        """The window is written: the manifest, and stop the program if asked. A window
        of a loop's steps waits for the loop to go on as long again (`_confirmed`)."""
        self.window.mode, self.window.loop = self.mode, self.finder.loop
        provisional = self.mode is Mode.LOOP and self.finder.loop is not None
        if provisional:
            self.provisional.confirm_at = 2 * self.count
        else:
            self.finder.remove()
        self.spec.forget()  # the fallback is not needed any more
        say(f"recorded {self.window.recorded} {self.mode.value if self.mode else ''} steps"
            f"{' and a detail step' if self.window.detail_kept else ''}")
        self.provisional.drop()  # an earlier loop's window, set aside: this one replaces it
        self.write_manifest("running", None, None)
        if self.stop and not provisional:
            self.finish("completed", 0, None)
            profiling.stop_program()

    def _confirmed(self) -> None:
        """The window's loop went on as long again: it is the step loop."""
        self.provisional.confirm_at = None
        self.finder.remove()
        if self.stop:
            self.finish("completed", 0, None)
            profiling.stop_program()

    def _set_aside(self) -> None:
        """Keep the written window (and its timing) and start over."""
        self.provisional.set_aside(Aside(self.window, self.timing, self.first_index))
        self.window = self._new_window()
        self.timing = StepTiming()

    def _restore_aside(self) -> None:
        """The program ended before a later loop's window was written: the set-aside
        window is the recording."""
        aside = self.provisional.take()
        if aside is None:
            return
        self._drop_window()
        self.provisional.put_back()
        self.window, self.timing, self.first_index = aside.window, aside.timing, aside.first_index

    def _drop_window(self) -> None:
        """Drop a window in progress (:meth:`Window.drop`); one whose timed steps are
        written is DONE then."""
        if self.window.drop(self.timing):
            self.finder.remove()
            self.write_manifest("running", None, None)

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
                    if self.provisional.aside is not None and self.window.kept is None:
                        self._restore_aside()
                    self.provisional.drop()
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
        self.window.finalize()
        if self.window.kept is not None:
            return
        try:
            self.spec.stop()
        except Exception as e:  # noqa: BLE001
            say(f"could not stop the profiler ({type(e).__name__}: {e})")
            self.spec.prof = None
        if self.spec.prof is None:
            self._say_nothing_recorded()
            return
        if self.mode is not None:
            say(f"the program ended after {self.count} {self.mode.value} steps, before the "
                f"window ({self.warmup} warm-up + 1 + {self.steps}): keeping the profile "
                "from torch import to the first step")
        else:
            say("no steps found (no optimizer, module or repeating loop): recorded the "
                "whole program")
        if self.spec.write():
            self.window.kept = "whole_program"

    def _say_nothing_recorded(self) -> None:
        if not (self.auto and self.speculate):
            pass
        elif self.mode is not None:
            say(f"nothing was recorded: the program ended after {self.count} "
                f"{self.mode.value} steps, before the window ({self.warmup} warm-up + 1 + "
                f"{self.steps})")
        elif not self.spec.started:
            say("no steps found and the program never used CUDA: nothing was recorded")
        else:
            say("no steps found, and the whole-program profile was lost: nothing recorded")

    def manifest(self, status: str, exit_code: int | None, error: str | None) -> contract.Manifest:
        return build_manifest(self, contract.Program(status, exit_code, error), self._rank())

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
