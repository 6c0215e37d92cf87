#!/usr/bin/env bash
# Why host-heavy workloads run slower under `tensight run` (device machine, wheel in .whl/):
#   bash scripts/h200/overhead.sh [WORKLOAD...]   (default: device_ping_pong dataloader_starvation)
# Each workload alone (every step's time), then under `tensight run` as is, with
# TEARDOWN_CUPTI=1 (Kineto releases CUPTI when a profile stops) and with
# TENSIGHT_SPECULATE=0 (no speculative profile before the first step). Prints, per run,
# the warm-up steps' times (unprofiled, after the speculative profile) and the recorded ones.
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B=/tmp/overhead; rm -rf "$B"; mkdir -p "$B"
NAMES=("$@"); [ ${#NAMES[@]} -gt 0 ] || NAMES=(device_ping_pong dataloader_starvation)
cd workloads
for w in "${NAMES[@]}"; do
  WORKLOAD_ALL_TIMES=1 python3 "$w.py" --steps 20 2>&1 >/dev/null | grep '^{' | tail -1 | tee "$B/$w.alone.json"
  for mode in default teardown nospec; do
    env=()
    [ $mode = teardown ] && env=(TEARDOWN_CUPTI=1)
    [ $mode = nospec ] && env=(TENSIGHT_SPECULATE=0)
    env "${env[@]}" python3 -m tensight run --steps 4 --warmup 5 --stop --format json \
      --out "$B/$w.$mode" -- python3 "$w.py" --steps 20 >"$B/$w.$mode.json" 2>"$B/$w.$mode.stderr"
    python3 - "$B/$w.$mode" "$w" "$mode" <<'PY'
import json, sys
from pathlib import Path
b = Path(sys.argv[1]); m = json.loads((b / "manifest.json").read_text())
t = m.get("timing", {})
r = json.loads(Path(str(b) + ".json").read_text())
print(f"{sys.argv[2]:24} {sys.argv[3]:9} warm-up host {[round(x, 1) for x in t.get('step_ms_unprofiled', [])]}"
      f" gpu {[round(x, 1) for x in t.get('step_ms_unprofiled_gpu', [])]}"
      f" | recorded {[round(s['dur_ms'], 1) for s in r['steps']]}")
PY
  done
done
