#!/usr/bin/env python3
"""Time Holistic Trace Analysis (HTA) on one Kineto trace, for bench/ingest.sh.

Input: a trace path (`.json` or `.json.gz`). It is linked alone into a temporary
folder (HTA reads a folder of per-rank traces), loaded with `TraceAnalysis`, and the
temporal breakdown and the idle time breakdown are computed (no plots). Output: one
line of JSON on stdout, `{"load_s": ..., "temporal_s": ..., "idle_s": ..., "total_s": ...}`
(seconds inside this process; the caller also times the whole process, imports
included). Run it with the Python of the venv bench/ingest.sh makes.
"""

import json
import os
import sys
import tempfile
import time


def main():
    if len(sys.argv) != 2:
        print("usage: hta_bench.py TRACE", file=sys.stderr)
        sys.exit(2)
    trace = os.path.abspath(sys.argv[1])
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        name = "rank-0." + ("trace.json.gz" if trace.endswith(".gz") else "trace.json")
        os.symlink(trace, os.path.join(d, name))
        t1 = time.perf_counter()
        analyzer = TraceAnalysis(trace_dir=d)
        t2 = time.perf_counter()
        analyzer.get_temporal_breakdown(visualize=False)
        t3 = time.perf_counter()
        analyzer.get_idle_time_breakdown(visualize=False)
        t4 = time.perf_counter()
    print(
        json.dumps(
            {
                "import_s": round(t1 - t0, 3),
                "load_s": round(t2 - t1, 3),
                "temporal_s": round(t3 - t2, 3),
                "idle_s": round(t4 - t3, 3),
                "total_s": round(t4 - t0, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
