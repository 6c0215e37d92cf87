#!/usr/bin/env python3
"""Rows and table of bench/ingest.sh (standard library only).

  ingest_row.py TMP SHAPE GB TRACE RUNS HTA_RUNS LOAD   # one JSON row on stdout
  ingest_row.py --table ROWS.jsonl OUT.json             # the table; all rows to OUT.json

A row reads the GNU `time -v` files TMP/t_SHAPE_GB.N (tensight) and TMP/h_SHAPE_GB.N
(HTA), and takes medians: wall seconds, CPU seconds, peak RSS.
"""

import json
import os
import platform
import re
import statistics
import subprocess
import sys


def gnu_time(path):
    text = open(path).read()

    def field(name):
        m = re.search(re.escape(name) + r":\s*(.+)", text)
        return m.group(1).strip() if m else None

    secs = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        secs = secs * 60 + float(part)
    return {
        "wall_s": secs,
        "cpu_s": float(field("User time (seconds)")) + float(field("System time (seconds)")),
        "rss_mb": int(field("Maximum resident set size (kbytes)")) / 1024,
    }


def medians(samples):
    return {
        "wall_s": round(statistics.median(s["wall_s"] for s in samples), 3),
        "min_wall_s": round(min(s["wall_s"] for s in samples), 3),
        "cpu_s": round(statistics.median(s["cpu_s"] for s in samples), 3),
        "rss_mb": round(statistics.median(s["rss_mb"] for s in samples), 1),
        "runs": len(samples),
    }


def row(tmp, shape, gb, trace, runs, hta_runs, load):
    size = os.path.getsize(trace)
    t = medians([gnu_time(f"{tmp}/t_{shape}_{gb}.{i}") for i in range(1, int(runs) + 1)])
    r = {"shape": shape, "gb": float(gb), "file_bytes": size, "load_before": load, "tensight": t}
    r["tensight"]["gb_per_s"] = round(size / 1e9 / t["wall_s"], 3)
    if int(hta_runs) > 0:
        h = medians([gnu_time(f"{tmp}/h_{shape}_{gb}.{i}") for i in range(1, int(hta_runs) + 1)])
        # The last JSON line (HTA may log to stdout too).
        inner = [
            json.loads([l for l in open(f"{tmp}/h_{shape}_{gb}.{i}.out") if l.startswith("{")][-1])
            for i in range(1, int(hta_runs) + 1)
        ]
        h["inside"] = inner
        r["hta"] = h
        r["hta_ratio"] = round(h["wall_s"] / t["wall_s"], 1)
    r["load_after"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(r))


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip():
            commit += "+dirty"
    except OSError:
        commit = ""
    return {"cpu": cpu, "nproc": os.cpu_count(), "kernel": platform.release(), "git_commit": commit}


def table(rows_path, out):
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    m = machine()
    json.dump({"machine": m, "rows": rows}, open(out, "w"), indent=2)
    print()
    print(f"machine  {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}, commit {m['git_commit']}")
    hdr = f"{'shape':<7} {'file GB':>8} {'median s':>9} {'GB/s':>6} {'CPU s':>6} {'peak RSS MB':>12} {'RSS/file':>9} {'HTA s':>8} {'x HTA':>6}  load (1/5/15 min, before)"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        t = r["tensight"]
        hta_s = f"{r['hta']['wall_s']:.1f}" if "hta" in r else "-"
        ratio = f"{r['hta_ratio']:.0f}" if "hta" in r else "-"
        rss_ratio = t["rss_mb"] * 2**20 / r["file_bytes"]
        print(
            f"{r['shape']:<7} {r['file_bytes'] / 1e9:>8.3f} {t['wall_s']:>9.3f} {t['gb_per_s']:>6.2f} {t['cpu_s']:>6.2f} "
            f"{t['rss_mb']:>12.0f} {rss_ratio:>9.2f} {hta_s:>8} {ratio:>6}  {r['load_before']}"
        )
    print()
    print(f"(tensight: median of {rows[0]['tensight']['runs'] if rows else 0} runs after a warm-up; written to {out})")


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        table(sys.argv[2], sys.argv[3])
    else:
        row(*sys.argv[1:8])
