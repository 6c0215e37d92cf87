"""How the program ends (only under ``tensight run``): its exit status, an uncaught
exception, SIGTERM or SIGHUP, noted without changing how it ends, so that the collector
finishes the bundle with the program's status."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tensight.profiling import say

__all__ = ["ProgramEnd"]

#: ``finish(status, exit_code, error)``: stop what runs, write the bundle.
Finish = Callable[[str, int | None, str | None], None]


class ProgramEnd:
    """Watches how this process's program ends and calls `finish` once it does.
    `recording()` says what the profiler records now (None: nothing), for the message of
    an out-of-memory crash; `bundle` is where it goes."""

    def __init__(self, finish: Finish, recording: Callable[[], str | None],
                 bundle: Path) -> None:
        self._finish = finish
        self._recording = recording
        self._bundle = bundle
        self.pid = os.getpid()
        self.finishing = False  # finish() is writing the bundle (a signal then waits)
        self._pending_signal: int | None = None
        self._exc: BaseException | None = None
        self._exit_code: int | None = None
        self._excepthook: Any = None

    def install(self) -> None:
        """Chain sys.excepthook, wrap sys.exit to learn the code, finish at exit."""
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
        self._install_signal_handlers()

    def end_pending(self) -> None:
        """After finish(): a SIGTERM/SIGHUP that came meanwhile ends the process now, as
        it would have."""
        pending, self._pending_signal = self._pending_signal, None
        if pending is not None:
            say(f"bundle written: {self._bundle}")
            signal.signal(pending, signal.SIG_DFL)
            os.kill(os.getpid(), pending)

    def _install_signal_handlers(self) -> None:
        """SIGTERM and SIGHUP end Python without running atexit: finish the bundle first,
        then die of the signal as the program would have (exit status 128 + signal).
        Only where the program left the default action; its own handler, set later,
        replaces this one (SIGINT needs none: it raises KeyboardInterrupt)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for name in ("SIGTERM", "SIGHUP"):
            sig = getattr(signal, name, None)
            if sig is None or signal.getsignal(sig) is not signal.SIG_DFL:
                continue
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.finishing and os.getpid() == self.pid:
            self._pending_signal = signum  # finish() ends the process when done
            return
        try:
            if os.getpid() == self.pid:
                self._finish("crashed", 128 + signum, f"killed by {signal.Signals(signum).name}")
                say(f"bundle written: {self._bundle}")
        except Exception as e:  # noqa: BLE001
            say(f"could not finish the bundle ({type(e).__name__}: {e})")
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        try:
            exc = self._exc
            if exc is None and sys.excepthook is not self._excepthook:
                exc = getattr(sys, "last_value", None)  # set for any uncaught exception
            if exc is not None:
                self._finish("crashed", 130 if isinstance(exc, KeyboardInterrupt) else 1,
                             self._crash_message(exc))
            elif self._exit_code:
                self._finish("crashed", self._exit_code, f"exited with code {self._exit_code}")
            else:
                self._finish("completed", 0, None)
            say(f"bundle written: {self._bundle}")
        except Exception as e:  # noqa: BLE001
            say(f"could not finish the bundle ({type(e).__name__}: {e})")

    def _crash_message(self, exc: BaseException) -> str:
        msg = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        what = self._recording()
        if what and _out_of_memory(exc):
            msg = (f"out of GPU memory while tensight's profiler recorded {what}; run "
                   f"the program once without tensight to see whether it fits on its "
                   f"own — {msg}")
            say(msg.split(" — ")[0])
        return msg


def _out_of_memory(exc: BaseException) -> bool:
    """A CUDA (or other accelerator) out-of-memory error."""
    oom = getattr(torch, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


def _exit_status(code: object) -> int:
    """The process exit status of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1
