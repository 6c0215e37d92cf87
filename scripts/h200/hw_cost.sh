#!/usr/bin/env bash
# Where the hardware pass's time goes on one ResNet-50 training step (device machine,
# wheel in .whl/): the program alone, the program under ncu profiling nothing (an NVTX
# range that never opens: ncu's fixed cost), and the full pass with ncu's cache flush
# between replay passes turned off (--cache-control none, through a TENSIGHT_NCU wrapper).
#   bash scripts/h200/hw_cost.sh
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
metrics=$(python3 scripts/h200/metrics.py)
bench=(python3 -m tensight.bench --model resnet50 --batch-size 32 --steps 1 --warmup 3)
s=$SECONDS; "${bench[@]}" >/dev/null 2>&1; echo "program alone: $((SECONDS - s)) s"
s=$SECONDS
ncu --clock-control none --target-processes all --nvtx --nvtx-include never_opened --metrics "$metrics" \
  "${bench[@]}" >/dev/null 2>&1
echo "under ncu, nothing profiled: $((SECONDS - s)) s"
cat > /tmp/ncu_nocache <<'SH'
#!/bin/sh
[ "$1" = "--version" ] && exec ncu "$@"
exec ncu --cache-control none "$@"
SH
chmod +x /tmp/ncu_nocache
TENSIGHT_NCU=/tmp/ncu_nocache python3 -m tensight bench --model resnet50 --batch-size 32 --steps 1 \
  --warmup 3 --hardware --out /tmp/nocache >/dev/null 2>/tmp/nocache.stderr
grep "hardware:" /tmp/nocache.stderr
