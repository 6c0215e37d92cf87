"""Live loop detection: the step of a program that has no optimizer step and calls no
module with parameters (benchmark scripts, inference over raw tensors, hand-written SGD).

:class:`LoopWatch` watches the back edges of loops in the user's code (not in torch, the
standard library or site-packages): ``sys.monitoring`` JUMP events on Python 3.12+ (code
that is not the user's is disabled at its first event, so it costs nothing after), a
``sys.settrace`` line tracer on 3.10 and 3.11 (only the user's frames get line events).
Loops are read from the bytecode (every backward jump closes one), so a loop is known,
with the loops around it, from its first back edge: those in its own function and, up
the stack, those the calling frames are inside.

A loop that has made :data:`MIN_BACK_EDGES` back edges is a candidate. When no loop of
the user's code is around it, or once the loops around it have had :data:`PATIENCE_S`
seconds to repeat too (longer while one of them is repeating), the watch asks its owner
which loop is the step. Time, not a count of the inner loop's iterations, is the
patience: a step's loop over parameters, frames, layers or tokens can make hundreds of
back edges before the step loop makes its first; an inner loop is the step only when
the loop around it does not repeat within that time (an epoch loop).
The owner stops the speculative profile, counts the ops recorded inside each loop's
iterations, and hands the candidates to the engine's ``choose_loop``, the choice the
engine makes between repeating Python frames on a plain trace: the outermost loop that
repeats and holds most of the work. From then on only that loop is watched, and each
of its back edges ends a step; when the program leaves it (a loop that only set things
up, three iterations of a generator expression), ``on_exit()`` tells the owner and the
watch starts over. Loops found without work are set aside and the watch goes on.
Nothing here profiles, prints or raises into the program.
"""

from __future__ import annotations

import dis
import inspect
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

#: Back edges a loop must make before it is a candidate (2 whole iterations between).
MIN_BACK_EDGES = 3
#: Seconds the loops around a candidate have to repeat too.
PATIENCE_S = 3.0
#: Iteration end times kept per loop (the first and the latest).
_KEEP = 64
#: Code flags of frames whose "return" trace event may be a yield, not the end.
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_RETURNS = {dis.opmap[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in dis.opmap}


def _returns(frame: FrameType) -> bool:
    """Whether a generator frame's "return" trace event is its end, not a yield."""
    try:
        return frame.f_code.co_code[frame.f_lasti] in _RETURNS
    except IndexError:
        return True


@dataclass(frozen=True)
class StaticLoop:
    """A loop in a code object: a backward jump from ``src`` to ``target`` (offsets)."""

    target: int
    src: int
    line: int
    #: A comprehension's loop (it builds a list, set or dict, or is a generator
    #: expression): it makes a value, it is no step loop.
    comprehension: bool = False

    def contains(self, offset: int) -> bool:
        return self.target <= offset <= self.src


_static_cache: dict[CodeType, tuple[StaticLoop, ...]] = {}
_APPENDS = {dis.opmap[n] for n in ("LIST_APPEND", "SET_ADD", "MAP_ADD")}
_COMPREHENSIONS = ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")
_ENDS_FLOW = {dis.opmap[n] for n in ("JUMP_BACKWARD", "JUMP_FORWARD", "JUMP_ABSOLUTE",
                                      "JUMP_BACKWARD_NO_INTERRUPT", "RETURN_VALUE",
                                      "RETURN_CONST", "RERAISE", "RAISE_VARARGS")
              if n in dis.opmap}


def static_loops(code: CodeType) -> tuple[StaticLoop, ...]:
    """Every loop of `code`, innermost (shortest) first: one per loop head, reaching to
    its furthest backward jump on the normal path. Jumps back from exception handlers
    (reached only through the exception table: a ``with`` block's cleanup, which 3.12
    places after the function's other code) are not the loop's: they would make it span
    loops that follow it."""
    got = _static_cache.get(code)
    if got is None:
        try:
            got = _static_cache[code] = _find_loops(code)
        except Exception:  # noqa: BLE001 - unusual code objects: no loops known
            got = _static_cache[code] = ()
    return got


def _find_loops(code: CodeType) -> tuple[StaticLoop, ...]:
    instrs = list(dis.get_instructions(code))
    at = {ins.offset: i for i, ins in enumerate(instrs)}
    # The instructions the normal control flow reaches from the entry.
    seen: set[int] = set()
    todo = [0] if instrs else []
    while todo:
        i = todo.pop()
        if i in seen or i >= len(instrs):
            continue
        seen.add(i)
        ins = instrs[i]
        jumps = (ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs) \
            and isinstance(ins.argval, int)
        if jumps and ins.argval in at:
            todo.append(at[ins.argval])
        if ins.opcode not in _ENDS_FLOW:
            todo.append(i + 1)
    reach: dict[int, int] = {}
    for i in seen:
        ins = instrs[i]
        if (ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs) \
                and isinstance(ins.argval, int) and ins.argval < ins.offset:
            reach[ins.argval] = max(reach.get(ins.argval, ins.offset), ins.offset)
    lines = sorted((start, line) for start, _, line in code.co_lines() if line is not None)

    def line_at(offset: int) -> int:
        return next((ln for off, ln in reversed(lines) if off <= offset), code.co_firstlineno)

    spans = sorted(reach.items(), key=lambda ts: ts[1] - ts[0])
    whole = code.co_name in _COMPREHENSIONS  # before 3.12 a comprehension is its own code

    def builds(t: int, src: int) -> bool:
        """An append of a comprehension in the loop itself, not in a loop inside it
        (3.12 inlines list, set and dict comprehensions into the enclosing code)."""
        for ins in instrs:
            if ins.opcode in _APPENDS and t <= ins.offset <= src:
                inner = next(((a, b) for a, b in spans if a <= ins.offset <= b))
                if inner == (t, src):
                    return True
        return False

    found = [StaticLoop(t, src, line_at(t), whole or builds(t, src)) for t, src in spans]
    return tuple(found)


@dataclass
class Loop:
    """One loop of the user's code, as seen so far."""

    code: CodeType
    static: StaticLoop
    thread: int
    #: Times (``time.time_ns()``) of its back edges: the ends of its iterations.
    ends: list[int] = field(default_factory=list)
    count: int = 0
    rejected: bool = False
    #: When it became a candidate (ns).
    candidate_ns: int | None = None
    #: The loops around it (keys, innermost first) when last seen.
    around: tuple[tuple[CodeType, int], ...] = ()

    @property
    def key(self) -> tuple[CodeType, int]:
        return (self.code, self.static.target)

    @property
    def where(self) -> str:
        return f"{_short(self.code.co_filename)}({self.static.line}): {self.code.co_name}"

    def describe(self) -> dict[str, Any]:
        return {"file": self.code.co_filename, "line": self.static.line,
                "function": self.code.co_name}


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else os.path.basename(path)
    except ValueError:
        return os.path.basename(path)


def _library_dirs() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.__file__), os.path.dirname(os.path.abspath(__file__))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(p)
    try:
        import torch

        dirs.add(os.path.dirname(torch.__file__))
    except Exception:  # noqa: BLE001
        pass
    return tuple(sorted(os.path.join(os.path.realpath(d), "") for d in dirs))


class LoopWatch:
    """Watches loops until one is chosen, then that loop's back edges.

    ``choose(candidates)`` (the owner) returns the step loop, or None to go on watching;
    ``on_step()`` is called at each back edge of the chosen loop, ``on_exit(loop)`` when
    the program leaves it. All run in the watched thread, between the program's
    bytecodes."""

    def __init__(self, choose: Callable[[list[Loop]], Loop | None],
                 on_step: Callable[[], None], on_exit: Callable[[Loop], None] | None = None,
                 thread: int | None = None) -> None:
        self._choose = choose
        self._on_step = on_step
        self._on_exit = on_exit
        self.thread = threading.get_ident() if thread is None else thread
        self.loops: dict[tuple[CodeType, int], Loop] = {}
        self.chosen: Loop | None = None
        self.note: str | None = None  # why the watch could not run, if it could not
        self._user: dict[CodeType, bool] = {}
        self._lib = _library_dirs()
        self._deciding = False
        self._tool: int | None = None
        self._tracer: Any = None
        self._active = False

    @property
    def active(self) -> bool:
        """Whether loops are watched now."""
        return self._active

    def may_choose(self, code: CodeType, loop: StaticLoop) -> bool:
        """Whether the watch may still choose `loop` of `code` as the step loop: it is
        watched (nothing chosen yet), no comprehension, and not set aside."""
        if not self._active or self.chosen is not None or loop.comprehension:
            return False
        seen = self.loops.get((code, loop.target))
        return seen is None or not seen.rejected

    # ---- what is the user's code -----------------------------------------------------

    def is_user(self, code: CodeType) -> bool:
        u = self._user.get(code)
        if u is None:
            f = code.co_filename
            if f.startswith("<"):
                u = f in ("<string>", "<stdin>") or f.startswith("<ipython-input")
            else:
                try:
                    real = os.path.realpath(f)
                except (OSError, ValueError):
                    real = f
                u = not real.startswith(self._lib)
            self._user[code] = u
        return u

    # ---- starting and stopping -------------------------------------------------------

    def start(self) -> bool:
        """Start watching every loop; False (and :attr:`note`) when it cannot."""
        if sys.version_info >= (3, 12):
            return self._start_monitoring()
        return self._start_settrace()

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._active = False
        if self._tool is not None:
            mon = sys.monitoring  # type: ignore[attr-defined]
            try:
                mon.set_events(self._tool, 0)
                if self.chosen is not None:
                    mon.set_local_events(self._tool, self.chosen.code, 0)
                for ev in (mon.events.JUMP, mon.events.BRANCH, mon.events.PY_RETURN):
                    mon.register_callback(self._tool, ev, None)
                mon.free_tool_id(self._tool)
            except Exception:  # noqa: BLE001
                pass
            self._tool = None
        if self._tracer is not None:
            if sys.gettrace() is self._tracer:
                sys.settrace(None)
            f: FrameType | None = sys._getframe()
            while f is not None:
                if getattr(f.f_trace, "_tensight", False):
                    f.f_trace = None
                f = f.f_back
            self._tracer = None

    # ---- Python 3.12+: sys.monitoring ------------------------------------------------

    def _start_monitoring(self) -> bool:
        mon = sys.monitoring  # type: ignore[attr-defined]
        for tool in (4, 3, 5):
            try:
                mon.use_tool_id(tool, "tensight")
            except ValueError:
                continue
            self._tool = tool
            break
        else:
            self.note = "every sys.monitoring tool id is taken"
            return False
        mon.register_callback(self._tool, mon.events.JUMP, self._on_jump)
        mon.register_callback(self._tool, mon.events.BRANCH, self._on_branch)
        mon.register_callback(self._tool, mon.events.PY_RETURN, self._on_return)
        mon.set_events(self._tool, mon.events.JUMP)
        self._active = True
        return True

    def _on_jump(self, code: CodeType, src: int, dst: int) -> Any:
        chosen = self.chosen
        if chosen is not None and code is chosen.code:
            if dst < src:
                if dst == chosen.static.target:
                    self._back_edge(code, chosen.static, sys._getframe(1))
            elif chosen.static.contains(src) and not chosen.static.contains(dst):
                self._left(chosen)  # a break
            return None
        if dst >= src or not self.is_user(code):
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]
        for s in static_loops(code):
            if s.target == dst:
                self._back_edge(code, s, sys._getframe(1))
                break
        return None

    def _on_branch(self, code: CodeType, src: int, dst: int) -> Any:
        """Only the chosen loop's code: the branch out of it (the loop ended)."""
        chosen = self.chosen
        if chosen is not None and code is chosen.code and chosen.static.contains(src) \
                and not chosen.static.contains(dst):
            self._left(chosen)
        return None

    def _on_return(self, code: CodeType, offset: int, value: Any) -> Any:
        chosen = self.chosen
        if chosen is not None and code is chosen.code:
            self._left(chosen)
        return None

    # ---- Python 3.10, 3.11: sys.settrace ---------------------------------------------

    def _start_settrace(self) -> bool:
        if sys.gettrace() is not None:
            self.note = "a trace function (debugger, coverage) is already set"
            return False

        def tracer(frame: FrameType, event: str, arg: Any) -> Any:
            if event != "call":
                return None
            code = frame.f_code
            if self.chosen is not None:
                return self._local(frame) if code is self.chosen.code else None
            return self._local(frame) if self.is_user(code) and static_loops(code) else None

        tracer._tensight = True  # type: ignore[attr-defined]
        self._tracer = tracer
        sys.settrace(tracer)
        # Frames already running (the module that imported torch, a main() around it)
        # get line events too.
        self._trace_running(sys._getframe(1))
        self._active = True
        return True

    def _trace_running(self, f: FrameType | None) -> None:
        """Line events for the user's frames from `f` up the stack that have loops."""
        while f is not None:
            if f.f_trace is None and self.is_user(f.f_code) and static_loops(f.f_code):
                f.f_trace = self._local(f)
                f.f_trace_lines = True
            f = f.f_back

    def _local(self, frame: FrameType) -> Any:
        prev = [frame.f_lasti]

        def local(fr: FrameType, event: str, arg: Any) -> Any:
            chosen = self.chosen
            if chosen is not None and fr.f_code is chosen.code:
                returned = event == "return" and (not fr.f_code.co_flags & _SUSPENDS
                                                  or _returns(fr))
                if returned or (event == "line" and prev[0] >= chosen.static.target
                                         and not chosen.static.contains(fr.f_lasti)
                                         and chosen.static.contains(prev[0])):
                    self._left(chosen)
            if event == "line":
                at = fr.f_lasti
                if at < prev[0]:
                    # A jump back: the innermost loop of this code that spans it.
                    for s in static_loops(fr.f_code):
                        if s.target <= at and s.src >= prev[0] - 2 and s.contains(at):
                            self._back_edge(fr.f_code, s, fr)
                            break
                prev[0] = at
            return local

        local._tensight = True  # type: ignore[attr-defined]
        return local

    # ---- back edges ------------------------------------------------------------------

    def _around(self, code: CodeType, loop: StaticLoop, frame: FrameType) -> \
            tuple[tuple[CodeType, int], ...]:
        """The loops around `loop`, innermost first: in its own code, then in each user
        frame up the stack, those the frame is inside now."""
        out = [(code, s.target) for s in static_loops(code)
               if s.target < loop.target and s.src >= loop.src]
        f = frame.f_back
        while f is not None:
            if self.is_user(f.f_code):
                out += [(f.f_code, s.target) for s in static_loops(f.f_code)
                        if s.contains(f.f_lasti)]
            f = f.f_back
        return tuple(out)

    def _back_edge(self, code: CodeType, static: StaticLoop, frame: FrameType) -> None:
        if not self._active or threading.get_ident() != self.thread:
            return
        chosen = self.chosen
        if chosen is not None:
            if code is chosen.code and static == chosen.static:
                try:
                    self._on_step()
                except Exception:  # noqa: BLE001 - the owner handles its own errors
                    pass
            return
        key = (code, static.target)
        loop = self.loops.get(key)
        if loop is None:
            loop = self.loops[key] = Loop(code, static, self.thread,
                                          rejected=static.comprehension)
        loop.count += 1
        now = time.time_ns()
        if len(loop.ends) >= _KEEP:
            del loop.ends[1]
        loop.ends.append(now)
        if loop.rejected or loop.count < MIN_BACK_EDGES:
            return
        if loop.candidate_ns is None:
            loop.candidate_ns = now
            loop.around = self._around(code, static, frame)
        # The outermost of it and the loops around it that repeat: the step if nothing
        # around it is left that may still repeat, or once they had their time.
        chain = [loop] + [self.loops[k] for k in loop.around if k in self.loops]
        ready = [lp for lp in chain if lp.count >= MIN_BACK_EDGES and not lp.rejected]
        outermost = ready[-1]
        pending = len(loop.around) - loop.around.index(outermost.key) - 1 \
            if outermost is not loop else len(loop.around)
        if pending == 0 or self._waited(loop, chain, now):
            self._decide([lp for lp in chain if lp.count >= 2 and not lp.rejected])

    @staticmethod
    def _waited(loop: Loop, chain: list[Loop], now: int) -> bool:
        """Whether the loops around `loop` had their time to repeat: :data:`PATIENCE_S`
        since it became a candidate, and longer while one of them is repeating (its last
        back edge is more recent than that): it is the step once it has, a loop over
        parameters, frames or layers is not. A loop around that does not repeat within
        :data:`PATIENCE_S` (an epoch) leaves the step to the loop inside it."""
        patience = PATIENCE_S * 1e9
        if loop.candidate_ns is None or now - loop.candidate_ns < patience:
            return False
        return not any(lp.count and now - lp.ends[-1] < patience for lp in chain[1:]
                       if not lp.rejected)

    def _left(self, loop: Loop) -> None:
        """The program left the chosen loop: watch every loop again."""
        if self.chosen is not loop or threading.get_ident() != self.thread:
            return
        self.chosen = None
        if self._tool is not None:
            mon = sys.monitoring  # type: ignore[attr-defined]
            mon.set_local_events(self._tool, loop.code, 0)
            mon.set_events(self._tool, mon.events.JUMP)
            mon.restart_events()
        elif self._tracer is not None:
            # The frames running now lost their line events when the loop was chosen
            # (`_decide`): the loop around the call that returns next is in one of them.
            self._trace_running(sys._getframe(1))
        if self._on_exit is not None:
            try:
                self._on_exit(loop)
            except Exception:  # noqa: BLE001 - the owner handles its own errors
                pass

    def _decide(self, cands: list[Loop]) -> None:
        if self._deciding:
            return
        self._deciding = True
        try:
            chosen = self._choose(cands)
            if chosen is None:
                for lp in cands:
                    lp.rejected = True
                return
            self.chosen = chosen
            self.loops.clear()
            if self._tool is not None:
                mon = sys.monitoring  # type: ignore[attr-defined]
                mon.set_events(self._tool, 0)
                mon.set_local_events(self._tool, chosen.code, mon.events.JUMP
                                     | mon.events.BRANCH | mon.events.PY_RETURN)
                mon.restart_events()
            else:
                f: FrameType | None = sys._getframe()
                while f is not None:  # other frames stop their line events
                    if f.f_code is not chosen.code and getattr(f.f_trace, "_tensight", False):
                        f.f_trace = None
                    f = f.f_back
        finally:
            self._deciding = False
