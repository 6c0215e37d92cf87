#!/usr/bin/env bash
# The accuracy suite on the H200 device machine (issues 4 and 5). Run from the repo root
# there, with the wheel built here in .whl/ (maturin build --release -o .whl):
#
#   bash scripts/h200/accuracy.sh [hw] [resnet-hw] [WORKLOAD...] [bundles-only WORKLOAD...]
#
#   hw         tensight run --hardware on workloads/transposed_view.py, transposed_chain.py
#              and their --fixed variants (bundles with ncu.csv.gz: the V001/V003 fixtures)
#   resnet-hw  the wall time of the hardware pass for one ResNet-50 training step
#   WORKLOAD   workloads/harness.py --out: unprofiled timings + one bundle each
#   bundles-only WORKLOAD...  the bundles alone (harness.py --bundles-only)
#
# Everything it records goes into $OUT/accuracy.tgz (the device tool brings back at most
# 8 files); the log into $OUT/log.txt. Stops itself before the device's 10-minute limit.
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}
DEADLINE=$((SECONDS + ${BUDGET_S:-560}))
mkdir -p "$OUT"
R=/tmp/acc; rm -rf "$R"; mkdir -p "$R"
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
[ "${OVERLAY:-0}" = 1 ] && cp python/tensight/_boot/sitecustomize.py /tmp/site/tensight/_boot/  # the tree's boot hook
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
ncu --version | tail -1
left() { echo $((DEADLINE - SECONDS)); }

HW=0; RESNET=0; NAMES=(); ONLY_BUNDLES=(); MODE=timed
for a in "$@"; do
  case "$a" in
    hw) HW=1 ;; resnet-hw) RESNET=1 ;; bundles-only) MODE=bundles ;;
    *) if [ $MODE = timed ]; then NAMES+=("$a"); else ONLY_BUNDLES+=("$a"); fi ;;
  esac
done

if [ $HW = 1 ]; then
  mkdir -p "$R/hw"
  for w in transposed_view transposed_chain; do
  for v in "" "--fixed"; do
    tag=$w${v:+_fixed}
    ( time timeout $(( $(left) - 30 )) python3 -m tensight run --hardware --steps 3 --warmup 3 --stop \
        --out "$R/hw/$tag" -- python3 workloads/$w.py $v --steps 12 ) \
      >"$R/hw/$tag.stdout" 2>"$R/hw/$tag.stderr" || true
    echo "== $tag"; tail -5 "$R/hw/$tag.stderr"
    head -c 600 "$R/hw/$tag/ncu.log" 2>/dev/null; echo
  done
  done
fi

if [ ${#NAMES[@]} -gt 0 ]; then
  timeout $(( $(left) - ( RESNET ? 200 : 20 ) )) \
    python3 workloads/harness.py --out "$R/harness" --results "$R" --only "${NAMES[@]}"
fi
if [ ${#ONLY_BUNDLES[@]} -gt 0 ]; then
  timeout $(( $(left) - ( RESNET ? 200 : 20 ) )) \
    python3 workloads/harness.py --out "$R/harness" --results "$R" --bundles-only --only "${ONLY_BUNDLES[@]}"
fi

if [ $RESNET = 1 ] && [ "$(left)" -gt 60 ]; then
  ( time timeout $(( $(left) - 15 )) python3 -m tensight bench --model resnet50 --batch-size 32 --steps 1 \
      --warmup 3 --hardware --out "$R/resnet50_hw" ) >"$R/resnet50_hw.stdout" 2>"$R/resnet50_hw.stderr"
  echo "== resnet50 hardware pass: exit $?"; tail -6 "$R/resnet50_hw.stderr"
  python3 -c "import json; print(json.load(open('$R/resnet50_hw/manifest.json')).get('hardware'))" || true
  rm -f "$R/resnet50_hw/trace.json.gz" "$R/resnet50_hw/et.json.gz"  # too big to bring back; the pass is what counts
fi

tar czf "$OUT/accuracy.tgz" -C /tmp acc
du -sh "$R"/* "$R"/*/* 2>/dev/null | sort -h | tail -30
