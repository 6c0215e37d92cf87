#!/usr/bin/env bash
# The accuracy suite on the H200 device machine (issues 4 and 5). Run from the repo root
# there, with the wheel built here in .whl/ (maturin build --release -o .whl):
#
#   bash scripts/h200/accuracy.sh [hw] [hw-every] [resnet-hw] [resnet-hw-every] [ncu-passes]
#                                 [WORKLOAD...] [bundles-only WORKLOAD...]
#
#   hw         tensight run --hardware on workloads/transposed_view.py, transposed_chain.py
#              and their --fixed variants (bundles with ncu.csv.gz: the V001/V003 fixtures)
#   hw-every   the same two unfixed workloads with --hardware-every-launch (to compare)
#   resnet-hw  the wall time of the hardware pass for one ResNet-50 training step
#   resnet-hw-every  the same with --hardware-every-launch
#   ncu-passes how many replay passes ncu needs per kernel for tensight's metrics
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

HW=0; HW_EVERY=0; RESNET=0; RESNET_EVERY=0; PASSES=0; NAMES=(); ONLY_BUNDLES=(); MODE=timed
for a in "$@"; do
  case "$a" in
    hw) HW=1 ;; hw-every) HW_EVERY=1 ;; resnet-hw) RESNET=1 ;; resnet-hw-every) RESNET_EVERY=1 ;;
    ncu-passes) PASSES=1 ;; bundles-only) MODE=bundles ;;
    *) if [ $MODE = timed ]; then NAMES+=("$a"); else ONLY_BUNDLES+=("$a"); fi ;;
  esac
done

if [ $PASSES = 1 ]; then
  metrics=$(python3 scripts/h200/metrics.py)
  probe="import torch; x = torch.ones(1 << 24, device='cuda'); y = x + 1; torch.cuda.synchronize()"
  passes() { ncu --clock-control none --metrics "$1" python3 -c "$probe" 2>&1 | grep -oE "[0-9]+ passes|==ERROR==.*" | tail -1; }
  all=$(passes "$metrics")
  echo "== ncu passes: all $(echo "$metrics" | tr ',' '\n' | wc -l) metrics: $all"
  case "$all" in *passes) ;; *) echo "ncu refused tensight's metrics: stopping"; exit 3 ;; esac
  [ "${PASSES_GROUPS:-0}" = 1 ] && for g in gpu__time dram__ l1tex__t_sectors l1tex__t_requests lts__ sm__warps_active sm__maximum \
           sm__throughput gpu__compute_memory sm__pipe_tensor smsp__average_warp_latency \
           smsp__average_warps_issue smsp__average_warps_active launch__; do
    rest=$(echo "$metrics" | tr ',' '\n' | grep -v "^$g" | paste -sd, -)
    echo "   without $g*: $(passes "$rest")"
  done
fi

resnet_hw() {  # TAG FLAGS...
  local tag=$1; shift
  [ "$(left)" -gt 60 ] || { echo "== $tag: no time left"; return; }
  ( time timeout $(( $(left) - 15 )) python3 -m tensight bench --model resnet50 --batch-size 32 --steps 1 \
      --warmup 3 --hardware "$@" --out "$R/$tag" ) >"$R/$tag.stdout" 2>"$R/$tag.stderr"
  echo "== $tag hardware pass: exit $?"; tail -6 "$R/$tag.stderr"
  grep -E "^ncu " -A2 "$R/$tag.stdout" | head -3
  python3 -c "import json; print(json.load(open('$R/$tag/manifest.json')).get('hardware'))" || true
  grep -E "hardware pass" "$R/$tag/ncu.log" 2>/dev/null | head -3
  rm -f "$R/$tag/trace.json.gz" "$R/$tag/et.json.gz"  # too big to bring back; the pass is what counts
}
[ $RESNET = 1 ] && resnet_hw resnet50_hw
[ $RESNET_EVERY = 1 ] && resnet_hw resnet50_hw_every --hardware-every-launch

hw_run() {  # TAG FLAGS... -- CMD...
  local tag=$1; shift
  local flags=(); while [ "$1" != "--" ]; do flags+=("$1"); shift; done; shift
  ( time timeout $(( $(left) - 30 )) python3 -m tensight run --hardware "${flags[@]}" --steps 3 \
      --warmup 3 --stop --out "$R/hw/$tag" -- "$@" ) >"$R/hw/$tag.stdout" 2>"$R/hw/$tag.stderr" || true
  echo "== $tag"; tail -5 "$R/hw/$tag.stderr"
  grep -E "^(ncu|tensor) " -A2 "$R/hw/$tag.stdout" | head -6
  grep -E "saves ~" "$R/hw/$tag.stdout" | head -3
  grep -E "hardware pass" "$R/hw/$tag/ncu.log" 2>/dev/null | head -3
}
mkdir -p "$R/hw"
if [ $HW = 1 ]; then
  for w in transposed_view transposed_chain; do
  for v in "" "--fixed"; do
    hw_run "$w${v:+_fixed}" -- python3 workloads/$w.py $v --steps 12
  done
  done
fi
if [ $HW_EVERY = 1 ]; then
  for w in transposed_view transposed_chain; do
    hw_run "${w}_every" --hardware-every-launch -- python3 workloads/$w.py --steps 12
  done
fi

if [ ${#NAMES[@]} -gt 0 ]; then
  timeout $(( $(left) - 20 )) \
    python3 workloads/harness.py --out "$R/harness" --results "$R" --only "${NAMES[@]}"
fi
if [ ${#ONLY_BUNDLES[@]} -gt 0 ]; then
  timeout $(( $(left) - 20 )) \
    python3 workloads/harness.py --out "$R/harness" --results "$R" --bundles-only --only "${ONLY_BUNDLES[@]}"
fi

tar czf "$OUT/accuracy.tgz" -C /tmp acc
du -sh "$R"/* "$R"/*/* 2>/dev/null | sort -h | tail -30
