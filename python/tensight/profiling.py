"""Around torch.profiler, for the collector: the option sets, keeping the profiler's
own log lines off the program's stderr, telling the program's profilers from ours,
and draining the GPU at the edges of what is recorded.

Option sets (why two): every op the profiler records costs host time, most of all the
Python stacks (``with_stack``: every Python call is recorded), then allocator events
and shapes. Timed steps are recorded with :data:`TIMED` (the CPU ops, runtime calls
and GPU activity; enough for timing and the op/kernel links), and one more step, the
detail step, with :data:`DETAIL` (stacks, shapes, memory, modules) and the execution
trace, whose cost times nothing. The engine carries the detail step's stacks, shapes
and allocator events over to the timed steps (``model::detail``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tensight.bundle import DRAIN, gzip_to

#: The timed steps: timing and links only.
TIMED: dict[str, Any] = {"record_shapes": False, "with_stack": False,
                          "with_modules": False, "profile_memory": False}
#: The detail step (and ``TENSIGHT_TIMED=full``'s timed steps): everything.
FULL: dict[str, Any] = {"record_shapes": True, "with_stack": True, "with_modules": True,
                         "profile_memory": True}
#: A CPU-only speculative profile from torch import: no stacks.
LIGHT: dict[str, Any] = {"record_shapes": True, "with_stack": False, "with_modules": False,
                          "profile_memory": True}


_label = ""  # "rank N: " on a rank of a distributed job (several processes share stderr)


def label(who: str) -> None:
    """Start every later :func:`say` line with `who` (``rank 1``)."""
    global _label
    _label = f"{who}: " if who else ""


def say(msg: str) -> None:
    """One progress line on stderr (never stdout)."""
    try:
        sys.stderr.write(f"tensight: {_label}{msg}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not break the program
        pass


def stop_program() -> None:
    """End the user's program after the recording (`--stop`): SystemExit on the main
    thread, so its cleanup runs; from another thread, at once, streams flushed."""
    say("stopping the program (--stop)")
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def detail_options() -> dict[str, Any]:
    """The detail step's options: all on, less those named in ``TENSIGHT_NO``
    (comma-separated: ``stack``, ``modules``, ``memory``, ``shapes``)."""
    off = {x.strip() for x in os.environ.get("TENSIGHT_NO", "").split(",") if x.strip()}
    return {"record_shapes": "shapes" not in off, "with_stack": "stack" not in off,
            "with_modules": "modules" not in off, "profile_memory": "memory" not in off}


def activities(cuda: bool) -> list[Any]:
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])


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


def silence() -> int | None:
    """Raise torch's C++ log threshold to ERROR; returns the level to restore."""
    lvl = _log_level()
    if lvl is None or lvl.value >= 2:
        return None
    old = int(lvl.value)
    lvl.value = 2
    return old


def unsilence(old: int | None) -> None:
    lvl = _log_level()
    if lvl is not None and old is not None:
        lvl.value = old


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Around the profiler's own calls: no C++ warnings (ET enabled/disabled, memory
    blocks of unknown size), no Kineto log lines, no Python warnings (with_modules is
    deprecated in new torch) — the program's stderr stays its own."""
    old = silence()
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
        unsilence(old)


_starting_ours = False
_watching = False


@contextlib.contextmanager
def ours() -> Iterator[None]:
    """Marks tensight's own profiler starts (the program's make tensight yield)."""
    global _starting_ours
    _starting_ours = True
    try:
        yield
    finally:
        _starting_ours = False


def start(prof: Any) -> None:
    """Start `prof` as tensight's own, quietly. A block allocated before and freed after
    uses up torch's warn-once about "memory blocks of unknown size"."""
    block = torch.empty(16)
    with quiet(), ours():
        prof.start()
        del block


def observer(path: Path) -> Any:
    """An execution-trace observer that writes `path`."""
    from torch.profiler import ExecutionTraceObserver

    et = ExecutionTraceObserver()
    et.register_callback(str(path))
    return et


def export(prof: Any, dst: Path) -> None:
    """Write the stopped profile `prof` as a gzipped Chrome trace at `dst`."""
    tmp = dst.with_name(dst.name.replace(".gz", "") + ".tmp")
    with quiet():
        prof.export_chrome_trace(str(tmp))
    gzip_to(tmp, dst)


def profiler_running() -> bool:
    """Whether a profiler runs in this thread (ours or the program's)."""
    fn = getattr(torch.autograd, "_profiler_enabled", None)
    try:
        return bool(fn()) if fn is not None else bool(torch.autograd.profiler._is_profiler_enabled)
    except Exception:  # noqa: BLE001
        return False


def watch_program_profilers(on_program_profiler: Any) -> None:
    """Wrap torch's ``_prepare_profiler`` (every Kineto profiler start calls it) so that a
    profiler the program starts itself first calls `on_program_profiler()`: a second
    Kineto session would cancel the first, and exporting that one can crash."""
    global _watching
    if _watching:
        return
    import torch.autograd.profiler as ap

    original = getattr(ap, "_prepare_profiler", None)
    if original is None:
        return

    def _prepare_profiler(*args: Any, **kwargs: Any) -> Any:
        if not _starting_ours:
            try:
                on_program_profiler()
            except Exception:  # noqa: BLE001 - never in the way of the program's profiler
                pass
        return original(*args, **kwargs)

    ap._prepare_profiler = _prepare_profiler
    _watching = True


def drain_gpu() -> None:
    """Wait for queued GPU work, at each edge of what is recorded: a GPU-bound program's
    host runs steps ahead of the GPU, and without this the first recorded steps would
    overlap invisible work from unrecorded ones and the last ones would end before their
    kernels ran (and be lost when the profiler stops)."""
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # named so that the engine can tell this sync from the program's own
            with torch.profiler.record_function(DRAIN):
                torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - never break the program for a measurement
        pass


def cuda_ready() -> bool:
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001
        return False


def gpu_present() -> bool:
    """Whether a GPU may be there, judged without initializing CUDA."""
    if torch.version.cuda is None and torch.version.hip is None:
        return False
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd",
                                           "/proc/driver/nvidia/version"))


def op_start_times(prof: Any) -> list[int] | None:
    """Start times (ns, ``time.time_ns()``'s clock) of the CPU ops a stopped profile
    recorded, sorted; None when it kept none."""
    try:
        results = prof.profiler.kineto_results
        from torch.autograd import DeviceType

        times = sorted(e.start_ns() for e in results.events()
                       if e.device_type() == DeviceType.CPU)
    except Exception:  # noqa: BLE001 - another torch: no counts
        return None
    return times or None
