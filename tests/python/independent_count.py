"""An independent count of a Kineto trace's step metrics, straight from the raw JSON.

Uses only ``json`` and ``gzip`` (no tensight code) and follows the documented
definitions, so that it cross-checks ``tensight analyze``:

* Steps: ``ProfilerStep#N`` CPU annotations (deduplicated by start); else the repeating
  user Python frame: ``python_function`` events with the same name under the same
  parent frame, occurring >= 2 times, whose total covers >= 1/2 of the parent (the
  trace window for top-level frames) and >= 1/3 of the trace window (earliest program
  event to latest end; the profiler's own `PyTorch Profiler (0)` span is not counted); the shallowest
  such frame wins, then the one covering the most time; else repeating
  ``Optimizer.step#`` / ``enumerate(DataLoader)#`` annotations; else the whole trace.
* Steps are contiguous windows. The GPU work of a step is what runtime calls starting
  in [its host start, the next host start) launched (the last step: [host start, host
  end]). A step is done at the later of its host end and the end of that GPU work; it
  ends there, but not before the next step's host start; the next step starts where
  it ends (the first at its host start).
* GPU work (kernel, gpu_memcpy, gpu_memset) belongs to the step in which it starts.

Times are exact: the JSON numbers (microseconds) are read as decimals and turned into
integer nanoseconds.

As a script: ``python3 independent_count.py TRACE [TRACE...]`` prints JSON.
"""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

Event = dict[str, Any]

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver"})
ANNOTATION_CATS = frozenset({"user_annotation", "cpu_op"})
# Path fragments of frames that belong to libraries, not to the user's program.
LIBRARY_PARTS = (
    "torch/",
    "site-packages/",
    "dist-packages/",
    "/lib/python",
    "torchvision/",
    "threading.py",
    "contextlib.py",
    "tensight/",
    "runpy.py",
)


@dataclass(frozen=True)
class Counts:
    """What the independent count finds (the fields of tensight's JSON ``summary``)."""

    steps: int
    step_source: str
    step_time_ms: float
    gpu_busy_pct: float
    kernels: int
    h2d_bytes: int


@dataclass(frozen=True)
class _Span:
    name: str
    start: int  # ns
    end: int  # ns


def _ns(x: Any) -> int:
    """Microseconds as written in the JSON (int or Decimal) to integer nanoseconds."""
    return int((Decimal(x) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def load_events(path: str | Path) -> list[Event]:
    """The ``traceEvents`` of a .json or .json.gz Kineto trace, numbers kept exact."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict)]


def _span(e: Event) -> _Span:
    start = _ns(e["ts"])
    return _Span(str(e.get("name", "")), start, start + _ns(e.get("dur", 0)))


def _cat(e: Event) -> str:
    return str(e.get("cat", "")).lower()


def is_user_frame(name: str) -> bool:
    """``file.py(line): fn`` where the file is the user's, not a library's."""
    if name.startswith("<") or name.startswith("built-in"):
        return False
    file = name.split("(", 1)[0]
    if not file.endswith(".py"):
        return False
    if file.startswith("torch") or file.startswith("functools.py"):
        return False
    return not any(part in file for part in LIBRARY_PARTS)


def _window(events: list[Event]) -> tuple[int, int]:
    """Earliest start to latest end of the program's events: complete ("X") events,
    leaving out the profiler's own session span (cat "Trace", `PyTorch Profiler (0)`),
    which opens before the first op."""
    spans = [_span(e) for e in events if e.get("ph") == "X" and "ts" in e and _cat(e) != "trace"]
    return min(s.start for s in spans), max(s.end for s in spans)


@dataclass
class _Frame:
    key: tuple[Any, ...]
    name: str
    start: int
    end: int
    parent: tuple[Any, ...] | None
    depth: int = 0


def _frames(events: list[Event]) -> list[_Frame]:
    """Python frames with their parent: from the profiler's ``Python parent id`` when
    every frame has one, else from nesting in time on the same thread."""
    raw = [e for e in events if _cat(e) == "python_function" and e.get("ph") == "X"]
    frames: list[_Frame] = []
    if raw and all("Python id" in e.get("args", {}) for e in raw):
        for e in raw:
            a, s, pid = e["args"], _span(e), e.get("pid")
            par = a.get("Python parent id")
            frames.append(
                _Frame((pid, a["Python id"]), s.name, s.start, s.end, None if par is None else (pid, par))
            )
    else:
        by_thread: dict[tuple[Any, Any], list[Event]] = {}
        for e in raw:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        for (pid, tid), evs in by_thread.items():
            spans = sorted((_span(e) for e in evs), key=lambda s: (s.start, -s.end))
            stack: list[_Frame] = []
            for i, s in enumerate(spans):
                while stack and stack[-1].end < s.end:
                    stack.pop()
                f = _Frame((pid, tid, i), s.name, s.start, s.end, stack[-1].key if stack else None)
                frames.append(f)
                stack.append(f)
    by_key = {f.key: f for f in frames}
    for f in frames:
        d, p = 0, f.parent
        while p is not None and p in by_key and d < 10_000:
            d, p = d + 1, by_key[p].parent
        f.depth = d
    return frames


def _repeating_frame(events: list[Event], window: tuple[int, int]) -> list[_Span] | None:
    frames = _frames(events)
    by_key = {f.key: f for f in frames}
    win = window[1] - window[0]
    groups: dict[tuple[Any, str], list[_Frame]] = {}
    for f in frames:
        if is_user_frame(f.name):
            groups.setdefault((f.parent, f.name), []).append(f)
    best: tuple[int, int, list[_Frame]] | None = None  # (depth, -total, frames)
    for (parent, _name), fs in groups.items():
        total = sum(f.end - f.start for f in fs)
        if parent is None:
            parent_dur = win
        elif parent in by_key:
            parent_dur = by_key[parent].end - by_key[parent].start
        else:
            continue
        if len(fs) < 2 or parent_dur <= 0 or 2 * total < parent_dur or 3 * total < win:
            continue
        cand = (fs[0].depth, -total, fs)
        if best is None or cand[:2] < best[:2]:
            best = cand
    if best is None:
        return None
    return sorted((_Span(f.name, f.start, f.end) for f in best[2]), key=lambda s: (s.start, s.end))


def host_steps(events: list[Event]) -> tuple[list[_Span], str]:
    """Host-side step ranges, and how they were found."""
    window = _window(events)
    ps = sorted(
        (_span(e) for e in events
         if _cat(e) in ANNOTATION_CATS and str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda s: (s.start, s.end),
    )
    if ps:
        dedup: dict[int, _Span] = {}
        for s in ps:
            dedup.setdefault(s.start, s)
        return list(dedup.values()), "profiler_step"
    frames = _repeating_frame(events, window)
    if frames is not None:
        return frames, "python_frame"
    for prefix, use_end in (("Optimizer.step#", True), ("enumerate(DataLoader)#", False)):
        ann = sorted(
            (_span(e) for e in events
             if _cat(e) == "user_annotation" and str(e.get("name", "")).startswith(prefix)),
            key=lambda s: (s.start, s.end),
        )
        if len(ann) >= 3:
            pts = [s.end if use_end else s.start for s in ann]
            return [_Span(f"step {i + 1}", a, b) for i, (a, b) in enumerate(zip(pts, pts[1:]))], "annotation"
    return [_Span("whole trace", *window)], "whole_trace"


def close_steps(events: list[Event], host: list[_Span]) -> list[_Span]:
    """Contiguous step windows ending when both the host range and its GPU work are done."""
    runtime = [(_ns(e["ts"]), e.get("args", {}).get("correlation"))
               for e in events if _cat(e) in RUNTIME_CATS and e.get("ph") == "X"]
    gpu_end_by_corr: dict[Any, int] = {}
    for e in events:
        if _cat(e) in GPU_CATS:
            c = e.get("args", {}).get("correlation")
            if c is not None and c not in gpu_end_by_corr:
                gpu_end_by_corr[c] = _span(e).end
    out: list[_Span] = []
    start = host[0].start
    for i, s in enumerate(host):
        last = i + 1 == len(host)
        hi = s.end if last else host[i + 1].start - 1
        ends = [gpu_end_by_corr[c] for ts, c in runtime if s.start <= ts <= hi and c in gpu_end_by_corr]
        done = max([s.end, *ends])
        end = done if last else max(done, host[i + 1].start)
        end = max(end, start)
        out.append(_Span(s.name, start, end))
        start = end
    return out


def count(path: str | Path) -> Counts:
    """Count steps, mean step time, GPU busy %, kernels and H2D bytes of a trace."""
    events = load_events(path)
    host, source = host_steps(events)
    steps = close_steps(events, host)
    gpu = [(e, _span(e)) for e in events if _cat(e) in GPU_CATS and e.get("ph") == "X"]
    busy = kernels = h2d = 0
    for st in steps:
        inside = sorted(((e, s) for e, s in gpu if st.start <= s.start < st.end), key=lambda x: x[1].start)
        kernels += sum(1 for e, _ in inside if _cat(e) == "kernel")
        h2d += sum(
            int(e.get("args", {}).get("bytes", 0) or 0)
            for e, s in inside
            if _cat(e) == "gpu_memcpy" and "HtoD" in s.name
        )
        cur_a = cur_b = None
        for _, s in inside:
            a, b = max(s.start, st.start), min(s.end, st.end)
            if b <= a:
                continue
            if cur_b is not None and a <= cur_b:
                cur_b = max(cur_b, b)
            else:
                if cur_a is not None and cur_b is not None:
                    busy += cur_b - cur_a
                cur_a, cur_b = a, b
        if cur_a is not None and cur_b is not None:
            busy += cur_b - cur_a
    total = sum(s.end - s.start for s in steps)
    return Counts(
        steps=len(steps),
        step_source=source,
        step_time_ms=total / len(steps) / 1e6,
        gpu_busy_pct=100.0 * busy / total if total > 0 else 0.0,
        kernels=kernels,
        h2d_bytes=h2d,
    )


def main(argv: list[str]) -> int:
    out = {p: asdict(count(p)) for p in argv}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
