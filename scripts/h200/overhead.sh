#!/usr/bin/env bash
# What `tensight run` costs a program (issue 11's target: profiled steps <= 1.3x the
# unprofiled step). Device machine, repo root, wheel built here in .whl/:
#
#   [REPEAT=2] [DEVICE=cuda] bash scripts/h200/overhead.sh [WORKLOAD...]
#                                                 (default: launch_bound sync_in_loop
#                                                  fp32_gemm late_migration cpu_preprocessing)
#
# A WORKLOAD is a file of workloads/ (NAME) or of tests/loop_styles/ (loop:NAME). Each runs
# alone (its own median step time: CUDA events), then under
# `tensight run --steps 5 --warmup 5 --stop`, REPEAT times (default 2) interleaved; the
# table gives each run's figures (the median timed step of the trace, the report's step
# time) and the ratio of their medians. Stops itself before BUDGET_S (default 540).
# Writes $OUT/overhead.md (the table) and $OUT/overhead.tgz (the bundles).
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
DEADLINE=$((SECONDS + ${BUDGET_S:-540}))
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B=/tmp/overhead; rm -rf "$B"; mkdir -p "$B"
NAMES=("$@"); [ ${#NAMES[@]} -gt 0 ] || NAMES=(launch_bound sync_in_loop fp32_gemm late_migration cpu_preprocessing)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
REPEAT=${REPEAT:-2}
# Alone and under `tensight run` interleaved, REPEAT times each: a host-bound program's own
# step time moves by up to 40% from one process to the next (2026-12-01), so one pair of
# runs says little; the table gives every run and the ratio of the medians.
for r in $(seq 1 "$REPEAT"); do
  for w in "${NAMES[@]}"; do
    [ $((DEADLINE - SECONDS)) -gt 45 ] || { echo "== $w (run $r): no time left"; continue; }
    case "$w" in
      loop:*) n=${w#loop:}; prog=(python3 tests/loop_styles/$n.py --iters 30 --device "${DEVICE:-cuda}") ;;
      *) n=$w; prog=(python3 workloads/$w.py --steps 30) ;;
    esac
    "${prog[@]}" >"$B/$n.r$r.alone.out" 2>"$B/$n.r$r.alone.err"
    timeout $((DEADLINE - SECONDS - 5)) python3 -m tensight run --steps 5 --warmup 5 --stop \
      --format json --out "$B/$n.r$r" -- "${prog[@]}" >"$B/$n.r$r.json" 2>"$B/$n.r$r.stderr"
    echo "$n (run $r): tensight run exit $?"; grep '^tensight:' "$B/$n.r$r.stderr" | grep -v bundle | head -4
  done
done
python3 - "$B" "$REPEAT" "${NAMES[@]}" <<'PY' | tee "$OUT/overhead.md"
import json, statistics, sys
from pathlib import Path
b, repeat = Path(sys.argv[1]), int(sys.argv[2])
def alone(n, r):
    for line in reversed((b / f"{n}.r{r}.alone.err").read_text().splitlines()):
        if line.startswith("{"):
            return json.loads(line)["median_step_ms"]
        if line.startswith("LOOP_RESULT "):
            return json.loads(line.split(" ", 1)[1])["median_step_ms"]
    return None
def profiled(n, r):
    rep = json.loads((b / f"{n}.r{r}.json").read_text())
    return statistics.median(s["dur_ms"] for s in rep["steps"])
def each(f, n):
    got = []
    for r in range(1, repeat + 1):
        try:
            got.append(f(n, r))
        except Exception:  # a failed run still gets its row
            got.append(None)
    return got
def unprofiled(n, r):
    """The collector's own timing of the warm-up steps (unprofiled, CUDA events where
    there is a GPU): what the hooks alone cost, and the step the report deflates to."""
    t = json.loads((b / f"{n}.r{r}" / "manifest.json").read_text()).get("timing") or {}
    ms = t.get("step_ms_unprofiled_gpu") or t.get("step_ms_unprofiled") or []
    return statistics.median(ms) if ms else None
show = lambda xs: " / ".join("–" if x is None else f"{x:.2f}" for x in xs)
print("| workload | alone ms (each run) | under `tensight run` ms (each run) | ratio of medians "
      "| its unprofiled warm-up ms (each run) | ratio of medians | steps found by |")
print("| --- | --- | --- | --- | --- | --- | --- |")
ratio_of = lambda xs, ys: (f"{statistics.median(ys) / statistics.median(xs):.2f}×"
                           if xs and ys else "–")
for w in sys.argv[3:]:
    n = w.split(":")[-1]
    a, t, u = each(alone, n), each(profiled, n), each(unprofiled, n)
    ok_a, ok_t, ok_u = ([x for x in xs if x] for xs in (a, t, u))
    try:
        m = json.loads((b / f"{n}.r1" / "manifest.json").read_text())
        how = m["step_detection"] + (f" ({m['step_loop']['line']})" if m.get("step_loop") else "")
    except Exception as e:
        how = f"failed: {type(e).__name__}"
    print(f"| {w} | {show(a)} | {show(t)} | {ratio_of(ok_a, ok_t)} | {show(u)} "
          f"| {ratio_of(ok_a, ok_u)} | {how} |")
PY
for n in "$B"/*/; do rm -f "$n"/trace.json.gz.tmp; done
tar czf "$OUT/overhead.tgz" -C /tmp overhead
