#!/usr/bin/env bash
# What `tensight run` costs a program (issue 11's target: profiled steps <= 1.3x the
# unprofiled step). Device machine, repo root, wheel built here in .whl/:
#
#   bash scripts/h200/overhead.sh [WORKLOAD...]   (default: launch_bound sync_in_loop
#                                                  fp32_gemm late_migration cpu_preprocessing)
#
# A WORKLOAD is a file of workloads/ (NAME) or of tests/loop_styles/ (loop:NAME). Each runs
# alone first (its own median step time: CUDA events), then under
# `tensight run --steps 5 --warmup 5 --stop`; the table gives the median of the timed steps
# as the trace has them (the report's step time) and as the collector's host clock saw
# them, and their ratio to the program alone. Stops itself before BUDGET_S (default 540).
# Writes $OUT/overhead.md (the table) and $OUT/overhead.tgz (the bundles).
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
DEADLINE=$((SECONDS + ${BUDGET_S:-540}))
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B=/tmp/overhead; rm -rf "$B"; mkdir -p "$B"
NAMES=("$@"); [ ${#NAMES[@]} -gt 0 ] || NAMES=(launch_bound sync_in_loop fp32_gemm late_migration cpu_preprocessing)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for w in "${NAMES[@]}"; do
  [ $((DEADLINE - SECONDS)) -gt 45 ] || { echo "== $w: no time left"; continue; }
  case "$w" in
    loop:*) n=${w#loop:}; prog=(python3 tests/loop_styles/$n.py --iters 30 --device cuda) ;;
    *) n=$w; prog=(python3 workloads/$w.py --steps 30) ;;
  esac
  "${prog[@]}" >"$B/$n.alone.out" 2>"$B/$n.alone.err"
  timeout $((DEADLINE - SECONDS - 5)) python3 -m tensight run --steps 5 --warmup 5 --stop \
    --format json --out "$B/$n" -- "${prog[@]}" >"$B/$n.json" 2>"$B/$n.stderr"
  echo "$n: tensight run exit $?"; grep '^tensight:' "$B/$n.stderr" | grep -v bundle | head -4
done
python3 - "$B" "${NAMES[@]}" <<'PY' | tee "$OUT/overhead.md"
import json, statistics, sys
from pathlib import Path
b = Path(sys.argv[1])
def alone(n):
    for line in reversed((b / f"{n}.alone.err").read_text().splitlines()):
        if line.startswith("{"):
            return json.loads(line)["median_step_ms"]
        if line.startswith("LOOP_RESULT "):
            return json.loads(line.split(" ", 1)[1])["median_step_ms"]
    return None
print("| workload | alone ms | under `tensight run` ms (trace) | ratio | host clock ms | ratio | steps found by |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in sys.argv[2:]:
    n = w.split(":")[-1]
    try:
        a = alone(n)
        r = json.loads((b / f"{n}.json").read_text())
        t = statistics.median(s["dur_ms"] for s in r["steps"])
        m = json.loads((b / n / "manifest.json").read_text())
        h = statistics.median(m["timing"]["step_ms_profiled"]) if m["timing"]["step_ms_profiled"] else None
        how = m["step_detection"] + (f" ({m['step_loop']['line']})" if m.get("step_loop") else "")
        ratio = lambda x: f"{x / a:.2f}×" if a and x else "–"
        print(f"| {w} | {a:.2f} | {t:.2f} | {ratio(t)} | {h if h is None else round(h, 2)} | {ratio(h)} | {how} |")
    except Exception as e:  # a failed run still gets its row
        print(f"| {w} | – | – | – | – | – | failed: {type(e).__name__}: {e} |")
PY
for n in "$B"/*/; do rm -f "$n"/trace.json.gz.tmp; done
tar czf "$OUT/overhead.tgz" -C /tmp overhead
