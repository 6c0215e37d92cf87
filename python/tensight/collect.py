"""The collector: records a bundle from inside the user's (unmodified) program.

Runs in the user's interpreter, so it stays small and never prints to stdout. Under
``tensight run`` it is installed by ``_boot/sitecustomize.py`` right after ``torch`` is
imported (:func:`install_from_env`); ``tensight.profile_model`` and ``tensight.profile``
use the same :class:`Collector` in-process.

Steps (a step ends at a *boundary*):

- ``optimizer``: the post hook of ``Optimizer.step`` (a global hook, so every optimizer).
  With several optimizers the iteration is learned: the boundary is the step of the
  optimizer that ran last before the first one repeated (D, G, D -> G ends an iteration).
  (The hook runs inside the ``Optimizer.step#...`` range, which so ends a few us after
  its ``ProfilerStep#k``.) A step skipped by ``GradScaler`` (inf/nan) is no boundary.
- ``forward``: while no optimizer has stepped, top-level calls (depth 0) of modules that
  own parameters (a loss module or a transform is no step), in the thread of the first
  module call, with the same learning; calls inside ``torch.compile`` are not seen. An
  optimizer step later switches to ``optimizer`` (a forward window in progress is dropped;
  one already written stays).
- ``whole_program``: no boundary at all: the profile runs to exit (see below).

The first event of a kind is a provisional boundary (the iteration is not learned yet),
so steps are counted from the first iteration's end. Window: the profiler starts at the
first boundary at which W (``TENSIGHT_WARMUP``) steps have completed; the next step is
its warm-up (profiled, discarded); the N (``TENSIGHT_STEPS``) steps after it are recorded
as ``ProfilerStep#1..N``. So steps 1..W run unprofiled, step W+1 is the profiler's
warm-up and steps W+2..W+N+1 are recorded (W=0 acts as W=1): W+N+1 iterations in all.
``TENSIGHT_ET=step`` (the default; ``window`` is the alternative) records the execution trace in one more step,
``ProfilerStep#N+1``, instead of over the N timed ones: the observer costs ~40 us per op
(3-5x the step time of ResNet-50 on an H200), so timed steps without it are faithful.

Until the first boundary a *speculative* profile runs, kept (in memory) only in case no
window gets recorded — a program with no steps, or one that ends or crashes before its
window — and then written as ``whole_program``. It starts at the program's own first
CUDA use (``torch.cuda``'s lazy init; starting Kineto earlier would query the device
count and freeze ``CUDA_VISIBLE_DEVICES`` before the program sets it), or, where no GPU
can be there, at ``torch`` import with the CPU only and no stacks. ``TENSIGHT_SPECULATE=0``
turns it off (troubleshooting: a program that fails only under it; such a program then
leaves no bundle if it ends before its window).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gzip
import json
import os
import platform
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

FORMAT_VERSION = "1.0"
TRACE = "trace.json.gz"
EXECUTION_TRACE = "et.json.gz"
_GZIP_LEVEL = 3  # traces compress ~10x at any level; 3 is several times faster than 9

_active: Collector | None = None  # at most one collector per process


def say(msg: str) -> None:
    """One progress line on stderr (never stdout)."""
    try:
        sys.stderr.write(f"tensight: {msg}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not break the program
        pass


def _gzip_to(src: Path, dst: Path) -> None:
    """Compress `src` into `dst` atomically, then remove `src`."""
    tmp = dst.with_name(dst.name + ".tmp")
    with open(src, "rb") as fin, gzip.open(tmp, "wb", compresslevel=_GZIP_LEVEL) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(tmp, dst)
    src.unlink()


_c10_level: Any = None


def _log_level() -> Any:
    """torch's C++ log threshold (``FLAGS_caffe2_log_level`` in libc10), or None."""
    global _c10_level
    if _c10_level is None:
        _c10_level = False
        try:
            lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
            _c10_level = ctypes.c_int.in_dll(lib, "FLAGS_caffe2_log_level")
        except Exception:  # noqa: BLE001 - not Linux, or another build: stay as is
            pass
    return _c10_level or None


def _silence() -> int | None:
    """Raise torch's C++ log threshold to ERROR; returns the level to restore."""
    lvl = _log_level()
    if lvl is None or lvl.value >= 2:
        return None
    old = int(lvl.value)
    lvl.value = 2
    return old


def _unsilence(old: int | None) -> None:
    lvl = _log_level()
    if lvl is not None and old is not None:
        lvl.value = old


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Around the profiler's own calls: no C++ warnings (ET enabled/disabled, memory
    blocks of unknown size), no Kineto log lines, no Python warnings (with_modules is
    deprecated in new torch) — the program's stderr stays its own."""
    old = _silence()
    kineto = "KINETO_LOG_LEVEL" not in os.environ
    if kineto:  # read once, when Kineto initializes (at the first profiler start)
        os.environ["KINETO_LOG_LEVEL"] = "6"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if kineto:
            os.environ.pop("KINETO_LOG_LEVEL", None)
        _unsilence(old)


def _compiling() -> bool:
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(fn()) if fn is not None else False


class _Cycle:
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


class Collector:
    """Finds steps, runs the profiler over the window, writes the bundle.

    `auto`: find steps with global hooks (else call :meth:`boundary` after each step and
    pass `detection`). `speculate`: profile from :meth:`install` until the first boundary,
    kept as the whole-program fallback. `stop`: exit the program once the window is
    written (``TENSIGHT_STOP=1``)."""

    def __init__(self, bundle: str | os.PathLike[str], steps: int, warmup: int, *,
                 stop: bool = False, auto: bool = True, speculate: bool = True,
                 light_start: bool = False, detection: str | None = None,
                 et_extra: bool = False) -> None:
        self.bundle = Path(bundle).resolve()
        self.steps = max(1, int(steps))
        self.warmup = max(0, int(warmup))
        self.stop = stop
        self.auto = auto
        self.speculate = speculate
        self.light_start = light_start
        self.et_extra = et_extra
        self.et_step_started = False
        self.pid = os.getpid()
        self.enabled = True
        self.mode: str | None = None if auto else (detection or "forward")
        self.command = list(sys.argv)
        self.cwd = os.getcwd()
        # step counting and timing
        self.count = 0  # boundaries passed in the current mode
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
        self.state = "waiting"  # -> warmup -> recording -> done
        self.prof: Any = None
        self.spec: Any = None  # speculative profile (running or stopped and kept)
        self.spec_running = False
        self.spec_full = False
        self.spec_tid: int | None = None
        self.kept: str | None = None  # "window" | "whole_program" once written
        self.options_kept: dict[str, bool] | None = None
        self.finished = False
        # hooks
        self._handles: list[Any] = []
        self._fwd_handles: list[Any] = []
        self._opt_cycle = _Cycle()
        self._fwd_cycle = _Cycle()
        self._fwd_tid: int | None = None
        self._depth = 0
        self._owns_params: dict[int, bool] = {}
        self._lock = threading.RLock()
        self._exc: BaseException | None = None
        self._exit_code: int | None = None
        self._excepthook: Any = None
        self._window_log_level: int | None = None
        self._et: Any = None
        self._told_busy = False
        self._spec_started = False

    # ---- lifecycle -------------------------------------------------------------------

    def install(self) -> None:
        """Start: hooks (auto), speculative profile, first manifest."""
        global _active
        if _active is not None and _active is not self:
            say("another tensight collector was active in this process: its recording is dropped")
            _active.abandon()
        _active = self
        _watch_program_profilers()
        self.bundle.mkdir(parents=True, exist_ok=True)
        if self.auto:
            from torch.nn.modules import module as nn_module
            from torch.optim import optimizer as optim_module

            self._handles.append(optim_module.register_optimizer_step_post_hook(self._on_opt_step))
            self._fwd_handles.append(nn_module.register_module_forward_pre_hook(self._on_fwd_pre))
            try:
                h = nn_module.register_module_forward_hook(self._on_fwd_post, always_call=True)
            except TypeError:  # torch < 2.1: no always_call (an exception in forward desyncs depth)
                h = nn_module.register_module_forward_hook(self._on_fwd_post)
            self._fwd_handles.append(h)
        if self.speculate:
            if torch.cuda.is_initialized() or not self.light_start:
                self._start_spec(True)
            else:
                # Kineto queries the CUDA device count when it starts, which would freeze
                # CUDA_VISIBLE_DEVICES before the program sets it: with a GPU around, wait
                # for the program's own first CUDA use (torch.cuda's lazy init).
                if not _gpu_present():
                    self._start_spec(False)
                if torch.version.cuda is not None or torch.version.hip is not None:
                    try:
                        torch.cuda._lazy_call(self._on_cuda_init)
                    except Exception:  # noqa: BLE001 - private API: no upgrade then
                        pass
        else:
            self.t_last = time.perf_counter()
            if not self.auto and self.warmup == 0:
                self._start_window()
        self.write_manifest("running", None, None)

    def remove_hooks(self) -> None:
        for h in self._handles + self._fwd_handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self._handles.clear()
        self._fwd_handles.clear()

    def abandon(self) -> None:
        """Drop everything (another collector takes over)."""
        global _active
        self.enabled = False
        self.remove_hooks()
        self._drop_window()
        self._stop_spec()
        self.spec = None
        if _active is self:
            _active = None

    # ---- step detection (hooks) --------------------------------------------------------

    def _on_opt_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.enabled:
            return
        try:
            with self._lock:
                if self.mode != "optimizer":
                    if self.state == "done":  # a window of forward steps is written
                        self.remove_hooks()
                        return
                    self._switch_to_optimizer()
                if self._opt_cycle.feed(id(optimizer)):
                    self._boundary()
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001 - never break the user's program
            self._fail(e)

    def _switch_to_optimizer(self) -> None:
        if self.mode == "forward":
            self._drop_window()
            self.count = 0
            self.warmup_done = 0
            self.ms_unprofiled.clear()
            self._gpu_marks.clear()
            self.t_last = None
        self.mode = "optimizer"
        for h in self._fwd_handles:  # forward hooks cost on every module call: drop them
            h.remove()
        self._fwd_handles.clear()

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
        if self._depth or self.mode == "optimizer":
            return None
        try:
            key = id(module)
            owns = self._owns_params.get(key)
            if owns is None:
                owns = self._owns_params[key] = next(module.parameters(), None) is not None
            if owns and self._fwd_cycle.feed(key):
                with self._lock:
                    if self.mode is None:
                        self.mode = "forward"
                    self._boundary()
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001
            self._fail(e)
        return None

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

    def _fail(self, e: BaseException) -> None:
        """Give up: no hooks, and nothing half-recorded is written."""
        say(f"collector error ({type(e).__name__}: {e}); the program runs on unprofiled")
        self.enabled = False
        self.remove_hooks()
        for drop in (self._drop_window, self._discard_spec):
            try:
                drop()
            except Exception:  # noqa: BLE001
                pass

    # ---- the window ------------------------------------------------------------------

    def boundary(self) -> None:
        """End of a step (manual mode; the hooks call this too)."""
        with self._lock:
            self._boundary()

    def _boundary(self) -> None:
        now = time.perf_counter()
        self.count += 1
        if self.spec_running:
            if self.spec_tid != threading.get_ident():
                say("steps run in another thread than the one that imported torch: "
                    "recording the whole program instead")
                self.enabled = False
                self.remove_hooks()
                return
            self._stop_spec()
        if self.state == "waiting":
            learned = (not self.auto) or (self._opt_cycle if self.mode == "optimizer"
                                          else self._fwd_cycle).learned
            if self.t_last is not None and learned:
                self.ms_unprofiled.append((now - self.t_last) * 1e3)
            if learned:
                self._gpu_mark()
            if self.count >= self.warmup:
                self._start_window()
        elif self.state == "warmup":
            _drain_gpu()  # recorded steps start with no GPU backlog from unrecorded ones
            self._read_gpu_marks()
            with _quiet():
                self.prof.step()
            self.state = "recording"
            say(f"recording {self.steps} steps ({self.mode} steps {self.count + 1}.."
                f"{self.count + self.steps}; {self.warmup_done} warm-up + 1 profiler warm-up before)")
        elif self.state == "recording":
            if self.t_last is not None:
                self.ms_profiled.append((now - self.t_last) * 1e3)
            self.recorded += 1
            if self.recorded >= self.steps:
                _drain_gpu()  # the recorded steps' GPU work completes inside the trace
                if self.et_extra and self._et is not None:  # one more step, with the ET
                    with _quiet():
                        self.prof.step()
                        self._et.start()
                    self.et_step_started = True
                    self.state = "et_step"
                    return
                self._finish_window()
                return
            with _quiet():
                self.prof.step()
        elif self.state == "et_step":
            with _quiet():
                self._et.stop()
            self._finish_window()
            return
        self.t_last = time.perf_counter()

    def _gpu_mark(self) -> None:
        """A CUDA event at this warm-up boundary (a few µs; never a sync)."""
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
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

    def _profiler(self, *, full: bool, windowed: bool, et_name: str,
                  cuda: bool | None = None) -> tuple[Any, Any]:
        acts = [ProfilerActivity.CPU]
        if full and (torch.cuda.is_initialized() if cuda is None else cuda):
            acts.append(ProfilerActivity.CUDA)
        et = ExecutionTraceObserver()
        et.register_callback(str(self.bundle / et_name))
        kw: dict[str, Any] = {"execution_trace_observer": et}
        if windowed:
            active = self.steps + (1 if self.et_extra else 0)
            kw = {"schedule": schedule(wait=0, warmup=1, active=active, repeat=1),
                  "on_trace_ready": self._on_trace_ready}
            if not self.et_extra:
                kw["execution_trace_observer"] = et
        opts: dict[str, Any] = (_window_options() if windowed
                                else dict(_FULL) if full else dict(_LIGHT))
        if not full:
            opts.update(with_stack=False, with_modules=False)
        self._window_opts = opts
        p = profile(activities=acts, **opts, **kw)
        return p, et

    def _start_window(self) -> None:
        if _profiler_running():  # the program profiles itself
            if not self._told_busy:
                say("the program runs torch.profiler itself: the window waits for it to end")
                self._told_busy = True
            return  # try again at the next boundary
        self.prof, self._et = self._profiler(full=True, windowed=True, et_name="et.json")
        self.warmup_done = self.count
        self._window_log_level = _silence()  # C++ warnings off for the few steps of the window
        block = torch.empty(16)
        with _quiet(), _ours():
            self.prof.start()
            del block
        self.state = "warmup"

    def _on_trace_ready(self, prof: Any) -> None:
        self._export(prof, "window")

    def _export(self, prof: Any, kind: str) -> None:
        tmp = self.bundle / "trace.json.tmp"
        with _quiet():
            prof.export_chrome_trace(str(tmp))
        _gzip_to(tmp, self.bundle / TRACE)
        self.kept = kind

    def _finish_window(self) -> None:
        """The last recorded step ended: export, write, and stop the program if asked."""
        t0 = time.perf_counter()
        with _quiet():
            self.prof.step()  # RECORD_AND_SAVE -> NONE: stop_trace + export (_on_trace_ready)
        self._close_prof()
        self.state = "done"
        self.remove_hooks()
        self.spec = None  # the fallback is not needed any more
        self._remove(self.bundle / "et.spec.json")
        say(f"recorded {self.recorded} {self.mode} steps "
            f"(exported in {time.perf_counter() - t0:.1f} s)")
        self.write_manifest("running", None, None)
        if self.stop:
            self.finish("completed", 0, None)
            say("stopping the program (--stop)")
            if threading.current_thread() is threading.main_thread():
                raise SystemExit(0)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def _close_prof(self) -> None:
        """Stop the windowed profiler (exports if it was recording) and finalize its ET."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        try:
            with _quiet():
                prof.__exit__(None, None, None)  # stop() + ET cleanup (closes et.json)
                if self._et is not None and self._et.is_registered:
                    self._et.unregister_callback()  # not the profiler's (TENSIGHT_ET=step)
        finally:
            self._et = None
            _unsilence(self._window_log_level)
            self._window_log_level = None
            et_json = self.bundle / "et.json"
            et_used = not self.et_extra or self.et_step_started
            if self.kept == "window" and et_used and et_json.exists():
                _gzip_to(et_json, self.bundle / EXECUTION_TRACE)
                self.options_kept = dict(getattr(self, "_window_opts", _FULL))
            else:
                self._remove(et_json)

    def _drop_window(self) -> None:
        if self.prof is not None and self.state in ("warmup", "recording", "et_step"):
            self.prof.on_trace_ready = None
            try:
                self._close_prof()
            except Exception:  # noqa: BLE001
                self.prof = None
            self.state = "waiting"
            self.recorded = 0
            self.ms_profiled.clear()

    # ---- the speculative whole-program profile ---------------------------------------

    def _start_spec(self, full: bool, cuda: bool | None = None) -> None:
        if _profiler_running():
            return
        self.spec, _ = self._profiler(full=full, windowed=False, et_name="et.spec.json",
                                      cuda=cuda)
        block = torch.empty(16)  # allocated before the start, freed after: see below
        with _quiet(), _ours():
            self.spec.start()
            del block  # uses up torch's warn-once about "memory blocks of unknown size"
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
                with _quiet():
                    self.spec.__exit__(None, None, None)  # keep its results in memory
            except Exception:  # noqa: BLE001 - e.g. the program's own torch.profiler took over
                self._discard_spec()

    def _discard_spec(self) -> None:
        spec, self.spec = self.spec, None
        self.spec_running = False
        et = getattr(spec, "execution_trace_observer", None)
        if et is not None and et.is_registered:
            with _quiet():
                et.unregister_callback()
        self._remove(self.bundle / "et.spec.json")

    # ---- the end ---------------------------------------------------------------------

    def finish(self, status: str, exit_code: int | None, error: str | None) -> None:
        """Stop what runs, keep what was recorded, write the manifest (idempotent)."""
        global _active
        with self._lock:
            if not self.finished:
                self.finished = True
                self.enabled = False
                self.remove_hooks()
                self._finalize_recording()
                if _active is self:
                    _active = None
            self.write_manifest(status, exit_code, error)

    def _finalize_recording(self) -> None:
        if self.state in ("warmup", "recording", "et_step"):
            try:
                self._close_prof()  # RECORD -> stop_trace + export of the steps so far
            except Exception as e:  # noqa: BLE001
                say(f"could not stop the profiler ({type(e).__name__}: {e})")
            self.state = "done"
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
                say(f"nothing was recorded: the program ended after {self.count} {self.mode} "
                    f"steps, before the window ({self.warmup} warm-up + 1 + {self.steps})")
            elif not self._spec_started:
                say("no steps found and the program never used CUDA: nothing was recorded")
            else:
                say("no steps found, and the whole-program profile was lost: nothing recorded")
            return
        if self.mode is not None:
            say(f"the program ended after {self.count} {self.mode} steps, before the window "
                f"({self.warmup} warm-up + 1 + {self.steps}): keeping the profile from "
                "torch import to the first step")
        else:
            say("no optimizer or forward steps found: recorded the whole program")
        try:
            self._export(self.spec, "whole_program")
            et = self.bundle / "et.spec.json"
            if et.exists():
                _gzip_to(et, self.bundle / EXECUTION_TRACE)
            self.options_kept = dict(_FULL) if self.spec_full else dict(_LIGHT)
        except Exception as e:  # noqa: BLE001
            say(f"could not write the trace ({type(e).__name__}: {e})")
        self.spec = None

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def manifest(self, status: str, exit_code: int | None, error: str | None) -> dict[str, Any]:
        whole = self.kept == "whole_program" or (self.kept is None and self.mode is None)
        et_ok = (self.bundle / EXECUTION_TRACE).exists()
        return {
            "format": "tensight-bundle",
            "format_version": FORMAT_VERSION,
            "tensight_version": _tensight_version(),
            "python_version": platform.python_version(),
            "torch_version": str(torch.__version__),
            "cuda_version": torch.version.cuda,
            "device": _device(),
            "command": self.command,
            "cwd": self.cwd,
            "step_detection": "whole_program" if whole else self.mode,
            "warmup_steps": 0 if whole else self.warmup_done,
            "steps_requested": self.steps,
            "steps_recorded": self.recorded if self.kept == "window" else 0,
            # TENSIGHT_ET=step: the ProfilerStep#k (k = steps + 1) that carries the execution
            # trace, after the timed steps; absent when the ET covers the window
            **({"execution_trace_step": self.steps + 1}
               if self.et_step_started and self.kept == "window" and et_ok else {}),
            "options": {**(self.options_kept or _FULL), "hardware": False},
            "program": {"status": status, "exit_code": exit_code, "error": error},
            "files": {"trace": TRACE if self.kept else None,
                      "execution_trace": EXECUTION_TRACE if self.kept and et_ok else None,
                      "ncu": None},
            "timing": {"step_ms_unprofiled": [round(x, 3) for x in self.ms_unprofiled],
                       "step_ms_unprofiled_gpu": [round(x, 3) for x in self.ms_unprofiled_gpu],
                       "step_ms_profiled": [round(x, 3) for x in self.ms_profiled]},
        }

    def write_manifest(self, status: str, exit_code: int | None, error: str | None) -> None:
        try:
            data = json.dumps(self.manifest(status, exit_code, error), indent=2)
            tmp = self.bundle / "manifest.json.tmp"
            tmp.write_text(data + "\n", encoding="utf-8")
            os.replace(tmp, self.bundle / "manifest.json")
        except Exception as e:  # noqa: BLE001
            say(f"could not write the manifest ({type(e).__name__}: {e})")

    # ---- process exit (only under `tensight run`) --------------------------------------

    def install_exit_handlers(self) -> None:
        """Note how the program ends, without changing it: chain sys.excepthook, wrap
        sys.exit to learn the code, finish at exit."""
        prev_hook = sys.excepthook
        prev_exit = sys.exit

        def excepthook(t: type[BaseException], v: BaseException, tb: Any) -> None:
            if os.getpid() == self.pid:
                self._exc = v
            prev_hook(t, v, tb)

        def exit_(code: object = None) -> None:
            if os.getpid() == self.pid:
                self._exit_code = _exit_status(code)
            prev_exit(code)  # type: ignore[arg-type]

        self._excepthook = excepthook
        sys.excepthook = excepthook
        sys.exit = exit_  # type: ignore[assignment]
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        try:
            exc = self._exc
            if exc is None and sys.excepthook is not self._excepthook:
                exc = getattr(sys, "last_value", None)  # set for any uncaught exception
            if exc is not None:
                code = 130 if isinstance(exc, KeyboardInterrupt) else 1
                msg = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self.finish("crashed", code, msg)
            elif self._exit_code:
                self.finish("crashed", self._exit_code, f"exited with code {self._exit_code}")
            else:
                self.finish("completed", 0, None)
            say(f"bundle written: {self.bundle}")
        except Exception as e:  # noqa: BLE001
            say(f"could not finish the bundle ({type(e).__name__}: {e})")


_FULL = {"record_shapes": True, "with_stack": True, "with_modules": True, "profile_memory": True}


def _window_options() -> dict[str, bool]:
    """Profiler options of the recorded window: all on, less those named in
    ``TENSIGHT_NO`` (comma-separated: ``stack``, ``modules``, ``memory``, ``shapes``),
    which trade detail (source lines, module names, allocator events, FLOPs) for a
    lower per-op cost on host-bound programs."""
    off = {x.strip() for x in os.environ.get("TENSIGHT_NO", "").split(",") if x.strip()}
    return {"record_shapes": "shapes" not in off, "with_stack": "stack" not in off,
            "with_modules": "modules" not in off, "profile_memory": "memory" not in off}
_LIGHT = {"record_shapes": True, "with_stack": False, "with_modules": False, "profile_memory": True}


_starting_ours = False
_watching = False


@contextlib.contextmanager
def _ours() -> Iterator[None]:
    """Marks tensight's own profiler starts (the program's make tensight yield)."""
    global _starting_ours
    _starting_ours = True
    try:
        yield
    finally:
        _starting_ours = False


def _profiler_running() -> bool:
    """Whether a profiler runs in this thread (ours or the program's)."""
    fn = getattr(torch.autograd, "_profiler_enabled", None)
    try:
        return bool(fn()) if fn is not None else bool(torch.autograd.profiler._is_profiler_enabled)
    except Exception:  # noqa: BLE001
        return False


def _watch_program_profilers() -> None:
    """Wrap torch's ``_prepare_profiler`` (every Kineto profiler start calls it) so that a
    profiler the program starts itself first makes tensight's stop: a second Kineto
    session would cancel the first, and exporting that one can crash."""
    global _watching
    if _watching:
        return
    import torch.autograd.profiler as ap

    original = getattr(ap, "_prepare_profiler", None)
    if original is None:
        return

    def _prepare_profiler(*args: Any, **kwargs: Any) -> Any:
        if not _starting_ours and _active is not None:
            try:
                _active.yield_to_program()
            except Exception:  # noqa: BLE001 - never in the way of the program's profiler
                pass
        return original(*args, **kwargs)

    ap._prepare_profiler = _prepare_profiler
    _watching = True


def _forked_child() -> None:
    """A forked child (a DataLoader worker) records nothing."""
    if _active is not None:
        _active.enabled = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def _exit_status(code: object) -> int:
    """The process exit status of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _drain_gpu() -> None:
    """Wait for queued GPU work, once at each edge of the recorded window: a GPU-bound
    program's host runs steps ahead of the GPU, and without this the first recorded
    steps would overlap invisible work from unrecorded ones and the last ones would
    end before their kernels ran (and be lost when the profiler stops)."""
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # named so that the engine can tell this sync from the program's own
            with torch.profiler.record_function("tensight::drain_gpu"):
                torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - never break the program for a measurement
        pass


def _gpu_present() -> bool:
    """Whether a GPU may be there, judged without initializing CUDA."""
    if torch.version.cuda is None and torch.version.hip is None:
        return False
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd",
                                           "/proc/driver/nvidia/version"))


def _device() -> dict[str, Any] | None:
    """The current CUDA device, if the program initialized CUDA (never initialize it)."""
    try:
        if not torch.cuda.is_initialized():
            return None
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        return {"name": p.name, "total_memory_bytes": int(p.total_memory),
                "capability": [int(p.major), int(p.minor)],
                "multi_processor_count": int(p.multi_processor_count)}
    except Exception:  # noqa: BLE001
        return None


def _tensight_version() -> str:
    try:
        from tensight import _native

        return str(_native.version())
    except Exception:  # noqa: BLE001
        return "unknown"


def _env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    value = int(raw)  # ValueError -> reported by the boot hook
    if value < minimum:
        raise ValueError(f"{name}={raw} is below {minimum}")
    return value


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "") or default
    if value not in choices:
        raise ValueError(f"{name}={value} (one of {', '.join(choices)})")
    return value


class HardwareCollector(Collector):
    """``tensight run --hardware``'s second run, under Nsight Compute: no profiler; step
    K (``TENSIGHT_HARDWARE_STEP``, counted as the window counts: step K runs between
    boundaries K-1 and K) is wrapped in the NVTX start/end range ``tensight_step`` that
    ncu's ``--nvtx-include tensight_step`` selects (process-wide: every thread's
    kernels). With ``repeats`` (``TENSIGHT_HARDWARE_REPEATS=skip``) op calls that repeat
    an earlier one of the step are marked for ncu to skip (:mod:`tensight.repeats`).
    Writes only ``ncu_range.json`` (whether the range closed, how many op calls were
    marked) into the bundle, never the manifest or a trace."""

    RANGE = "tensight_step"

    def __init__(self, bundle: str | os.PathLike[str], step: int, *, stop: bool,
                 repeats: bool = False) -> None:
        super().__init__(bundle, steps=1, warmup=0, stop=stop, auto=True, speculate=False)
        self.hw_step = max(1, int(step))
        self.range = "none"  # -> open -> closed
        self.repeats = repeats
        self._marker: Any = None
        self.op_calls: int | None = None
        self.op_repeats: int | None = None
        self.repeats_note: str | None = None

    def install(self) -> None:
        global _active
        _active = self
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module

        self._handles.append(optim_module.register_optimizer_step_post_hook(self._on_opt_step))
        self._fwd_handles.append(nn_module.register_module_forward_pre_hook(self._on_fwd_pre))
        try:
            h = nn_module.register_module_forward_hook(self._on_fwd_post, always_call=True)
        except TypeError:
            h = nn_module.register_module_forward_hook(self._on_fwd_post)
        self._fwd_handles.append(h)
        if self.hw_step == 1:
            self._push()

    def _push(self) -> None:
        _sync()
        self._mark_repeats()
        _nvtx(self.RANGE)
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

    def _switch_to_optimizer(self) -> None:
        if self.mode == "forward" and self.range == "open":  # forward steps were wrong
            self._close()
            self.op_calls = self.op_repeats = None
            self.range = "none"
        super()._switch_to_optimizer()
        if self.hw_step == 1 and self.range == "none":
            self._push()

    def _boundary(self) -> None:
        self.count += 1
        if self.range == "open" and self.count >= self.hw_step:
            self._close()
            self.range = "closed"
            self.state = "done"
            self.remove_hooks()
            self.finish("completed", 0, None)
            marked = (f"; {self.op_repeats} of {self.op_calls} op calls repeat an earlier one"
                      " (marked for ncu to skip)" if self.op_calls is not None else "")
            say(f"hardware pass: {self.mode} step {self.count} wrapped in NVTX range "
                f"{self.RANGE}{marked}")
            if self.repeats_note:
                say(f"hardware pass: {self.repeats_note}")
            if self.stop:
                say("stopping the program (--stop)")
                if threading.current_thread() is threading.main_thread():
                    raise SystemExit(0)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        elif self.range == "none" and self.count == self.hw_step - 1:
            self._push()

    def finish(self, status: str, exit_code: int | None, error: str | None) -> None:
        global _active
        with self._lock:
            self.finished = True
            self.enabled = False
            self.remove_hooks()
            if _active is self:
                _active = None
            self.write_manifest(status, exit_code, error)

    def write_manifest(self, status: str, exit_code: int | None, error: str | None) -> None:
        """Not the manifest (the first run's): ``ncu_range.json``."""
        try:
            data = json.dumps({"step": self.hw_step, "range": self.range,
                               "detection": self.mode, "steps_seen": self.count,
                               "program": status, "op_calls": self.op_calls,
                               "op_repeats": self.op_repeats,
                               "repeats_note": self.repeats_note})
            tmp = self.bundle / "ncu_range.json.tmp"
            tmp.write_text(data + "\n", encoding="utf-8")
            os.replace(tmp, self.bundle / "ncu_range.json")
        except Exception as e:  # noqa: BLE001
            say(f"could not write ncu_range.json ({type(e).__name__}: {e})")

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        if self.range != "closed":
            self.finish("completed", 0, None)
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


def install_from_env() -> Collector:
    """Install the collector described by the TENSIGHT_* environment (``tensight run``)."""
    if os.environ.get("TENSIGHT_HARDWARE") == "1":
        hw = HardwareCollector(os.environ["TENSIGHT_BUNDLE"],
                               step=_env_int("TENSIGHT_HARDWARE_STEP",
                                             max(1, _env_int("TENSIGHT_WARMUP", 3, 0)) + 1, 1),
                               stop=os.environ.get("TENSIGHT_STOP", "0") == "1",
                               repeats=_env_choice("TENSIGHT_HARDWARE_REPEATS", "profile",
                                                   ("profile", "skip")) == "skip")
        hw.install()
        hw.install_exit_handlers()
        return hw
    c = Collector(
        os.environ["TENSIGHT_BUNDLE"],
        steps=_env_int("TENSIGHT_STEPS", 5, 1),
        warmup=_env_int("TENSIGHT_WARMUP", 3, 0),
        stop=os.environ.get("TENSIGHT_STOP", "0") == "1",
        auto=True,
        speculate=os.environ.get("TENSIGHT_SPECULATE", "1") != "0",
        light_start=True,
        et_extra=_env_choice("TENSIGHT_ET", "step", ("window", "step")) == "step",
    )
    c.install()
    c.install_exit_handlers()
    return c
