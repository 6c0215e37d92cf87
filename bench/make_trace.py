#!/usr/bin/env python3
"""Build a large Kineto trace for the ingest benchmark by repeating a real one.

Input: a real PyTorch profiler (Kineto) trace, `.json` or `.json.gz` (gzip is
detected by its magic bytes). Output: an uncompressed Kineto trace of at least
`--gb` gigabytes (10^9 bytes), written streaming: the source (a few MB) is held in
memory, the output never is.

Each copy of the source's events is the source shifted in time by the source's span
(plus 1 ms), with every link id offset so that links stay unique and consistent:
`External id`, `correlation`, `Record function id`, `Sequence number`, the flow
arrows' `id` (ac2g flow ids equal correlation ids, so one offset serves all),
`Python id` / `Python parent id`, and the `N` of `ProfilerStep#N` (so steps keep
distinct, increasing numbers). Metadata events (`ph: "M"`) are written once. Every
event keeps its original bytes (Kineto's layout and number formatting) apart from
the substituted values; the top-level fields are copied verbatim around
`"traceEvents": [...]`.

Standard library only.
"""

import argparse
import gzip
import json
import os
import re
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE = os.path.join(HERE, "data", "nccl_parser_config-nccl_data.json.gz")
DEFAULT_OUT = os.path.join(HERE, "out", "big_trace.json")

# args fields holding link ids: offset per copy.
ID_FIELDS = (
    "External id",
    "correlation",
    "Record function id",
    "Sequence number",
    "Python id",
    "Python parent id",
)
NUM = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
TS_RE = re.compile(r'("ts"\s*:\s*)' + NUM)
ID_RE = re.compile(r'("(?:' + "|".join(re.escape(f) for f in ID_FIELDS) + r')"\s*:\s*)(-?\d+)(?=\s*[,}])')
FLOW_ID_RE = re.compile(r'("id"\s*:\s*)(\d+)(?=\s*[,}])')
STEP_RE = re.compile(r"(ProfilerStep#)(\d+)")
WS = " \t\r\n"


def die(msg, hint=None):
    print(f"make_trace: {msg}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    sys.exit(2)


def read_source(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        die(
            f"failed to read source trace {path}: no such file",
            "pass --source PATH to a real Kineto trace (.json or .json.gz)",
        )
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def skip_ws(s, i):
    while i < len(s) and s[i] in WS:
        i += 1
    return i


def split_top_level(text):
    """Return (fields_before, events_raw, fields_after) with raw text kept.

    fields_* are lists of raw `"key": value` strings; events_raw is a list of
    (raw_text, parsed_dict) per event of the traceEvents array.
    """
    dec = json.JSONDecoder()
    i = skip_ws(text, 0)
    if text[i] != "{":
        die("the source is not a Kineto trace object ({\"traceEvents\": [...]})")
    i = skip_ws(text, i + 1)
    before, after, events = [], [], None
    while text[i] != "}":
        kstart = i
        key, i = dec.raw_decode(text, i)
        i = skip_ws(text, i)
        assert text[i] == ":", f"expected ':' at byte {i}"
        i = skip_ws(text, i + 1)
        if key == "traceEvents":
            assert text[i] == "[", "traceEvents is not an array"
            events = []
            i = skip_ws(text, i + 1)
            while text[i] != "]":
                ev, end = dec.raw_decode(text, i)
                events.append((text[i:end], ev))
                i = skip_ws(text, end)
                if text[i] == ",":
                    i = skip_ws(text, i + 1)
        else:
            _, end = dec.raw_decode(text, i)
            (before if events is None else after).append(text[kstart:end])
            i = end
        i = skip_ws(text, i + 1 if key == "traceEvents" else i)
        if text[i] == ",":
            i = skip_ws(text, i + 1)
    if events is None:
        die("the source has no \"traceEvents\" array")
    return before, events, after


def ts_ns(txt):
    """Microseconds as written -> integer nanoseconds (exact)."""
    return int((Decimal(txt) * 1000).to_integral_value())


def fmt_us(ns):
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}"


def compile_event(raw, ev):
    """Turn an event's raw text into a str.format template plus its slot values.

    Slots: ("ts", ns) or ("id", value) or ("step", n).
    """
    slots = []
    pieces = []
    # Collect substitutions as (start, end, slot) on the raw text.
    subs = []
    m = TS_RE.search(raw)
    if m and isinstance(ev.get("ts"), (int, float)):
        subs.append((m.start(2), m.end(2), ("ts", ts_ns(m.group(2)))))
    for m in ID_RE.finditer(raw):
        subs.append((m.start(2), m.end(2), ("id", int(m.group(2)))))
    if ev.get("ph") in ("s", "f", "t"):
        for m in FLOW_ID_RE.finditer(raw):
            subs.append((m.start(2), m.end(2), ("id", int(m.group(2)))))
    for m in STEP_RE.finditer(raw):
        subs.append((m.start(2), m.end(2), ("step", int(m.group(2)))))
    subs.sort()
    pos = 0
    for s, e, slot in subs:
        if s < pos:
            continue  # overlapping match (should not happen)
        pieces.append(raw[pos:s].replace("{", "{{").replace("}", "}}"))
        pieces.append("{}")
        slots.append(slot)
        pos = e
    pieces.append(raw[pos:].replace("{", "{{").replace("}", "}}"))
    return "".join(pieces), slots


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="minimum output size in GB (10^9 bytes); default 1.0")
    ap.add_argument("--source", default=DEFAULT_SOURCE, help="real Kineto trace to repeat (.json or .json.gz)")
    ap.add_argument("-o", "--out", default=DEFAULT_OUT, help="output path; default bench/out/big_trace.json")
    args = ap.parse_args()

    t0 = time.time()
    text = read_source(args.source)
    before, events, after = split_top_level(text)
    del text

    lo, hi = None, None
    max_id, steps = 0, []
    compiled = []
    for raw, ev in events:
        ts = ev.get("ts")
        if ev.get("ph") != "M" and isinstance(ts, (int, float)):
            dur = ev.get("dur") if isinstance(ev.get("dur"), (int, float)) else 0
            lo = ts if lo is None else min(lo, ts)
            hi = ts + dur if hi is None else max(hi, ts + dur)
        tpl, slots = compile_event(raw, ev)
        for kind, v in slots:
            if kind == "id":
                max_id = max(max_id, abs(v))
            elif kind == "step":
                steps.append(v)
        compiled.append((ev.get("ph") == "M", tpl, slots))
    if lo is None:
        die("the source has no timed events")
    shift_ns = ts_ns(repr(hi - lo)) + 1_000_000  # span + 1 ms
    id_stride = 10 ** len(str(max_id + 1))  # keeps offset ids readable
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    per_copy = [c for c in compiled if not c[0]]
    meta = [c for c in compiled if c[0]]

    def render(tpl, slots, k):
        vals = []
        for kind, v in slots:
            if kind == "ts":
                vals.append(fmt_us(v + k * shift_ns))
            elif kind == "id":
                vals.append(str(v + k * id_stride) if v >= 0 else str(v))
            else:
                vals.append(str(v + k * step_stride))
        return tpl.format(*vals)

    target = int(args.gb * 1e9)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    tmp = args.out + ".part"
    written = 0
    n_events = 0
    copies = 0
    with open(tmp, "w", encoding="utf-8", buffering=1 << 22) as f:

        def w(s):
            nonlocal written
            f.write(s)
            written += len(s.encode("utf-8")) if not s.isascii() else len(s)

        w("{\n  ")
        for fld in before:
            w(fld + ",\n  ")
        w('"traceEvents": [\n  ')
        first = True
        for _, tpl, slots in meta:
            w(("" if first else ",\n  ") + render(tpl, slots, 0))
            first = False
            n_events += 1
        tail = "\n  ]" + "".join(",\n  " + fld for fld in after) + "\n}\n"
        while written + len(tail) < target:
            parts = [render(tpl, slots, copies) for _, tpl, slots in per_copy]
            w(("" if first else ",\n  ") + ",\n  ".join(parts))
            first = False
            n_events += len(parts)
            copies += 1
            if sys.stderr.isatty():
                print(f"\r{written / 1e9:.2f} / {args.gb:.2f} GB", end="", file=sys.stderr)
        w(tail)
    os.replace(tmp, args.out)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(
        f"wrote {args.out}: {written} bytes, {n_events} events "
        f"({copies} copies of {len(per_copy)} events + {len(meta)} metadata) in {time.time() - t0:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
