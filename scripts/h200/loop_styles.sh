#!/usr/bin/env bash
# Records every loop style of tests/loop_styles/ on the H200 device machine as a plain
# torch.profiler trace of 5 iterations (no schedule: the steps are for `analyze` to find),
# with the program's own timing of every iteration (its LOOP_RESULT line). Repo root there;
# needs no tensight. Writes $OUT/loops.tgz: unpack, then copy NAME.json.gz and the
# LOOP_RESULT json (as NAME.result.json) into tests/fixtures/loop_styles_h200/.
#
#   bash scripts/h200/loop_styles.sh          # about 2 minutes on the H200
#   bash scripts/h200/loop_styles.sh NAME...  # only these styles (e.g. one added since)
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
export PYTHONWARNINGS=ignore
L=/tmp/loops; rm -rf "$L"; mkdir -p "$L"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$L/context.txt"
python3 -c "import torch; print('torch', torch.__version__)" >> "$L/context.txt"
NAMES=("$@"); [ ${#NAMES[@]} -gt 0 ] || NAMES=(tests/loop_styles/*.py)
for f in "${NAMES[@]}"; do
  n=$(basename "$f" .py); f=tests/loop_styles/$n.py
  case $n in _*|check) continue ;; esac
  timeout 45 python3 "$f" --iters 16 --device cuda --trace "$L/$n.json" --trace-start 6 \
    --trace-iters 5 > "$L/$n.out" 2> "$L/$n.err"
  echo "$n exit $?"
  [ -f "$L/$n.json" ] && gzip -f "$L/$n.json"
done
tar czf "$OUT/loops.tgz" -C /tmp loops
