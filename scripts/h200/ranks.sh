#!/usr/bin/env bash
# Issue 17's check on the one H200 (no 2-GPU machine lent): a 2-rank DDP job
# (scripts/h200/ddp_one_gpu.py, both ranks on cuda:0, gloo all-reduce) timed alone with
# and without its planted straggler, then recorded by `tensight run -- torchrun` with it.
# Wheel built here in .whl/. Bundles (small) go to $OUT/ranks.tgz, the log to $OUT/log.txt.
#   bash scripts/h200/ranks.sh
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
TR=(python3 -m torch.distributed.run --standalone --nproc-per-node 2)
for v in "" "--straggler"; do
  echo "== alone ${v:-(no straggler)}"
  timeout 150 "${TR[@]}" scripts/h200/ddp_one_gpu.py $v 2>&1 | grep DDP_RESULT
done
R=/tmp/ranks; rm -rf "$R"; mkdir -p "$R"
echo "== tensight run (straggler)"
timeout 240 python3 -m tensight run --steps 4 --warmup 5 --stop --out "$R/ddp_straggler" -- \
  "${TR[@]}" scripts/h200/ddp_one_gpu.py --straggler > "$R/stdout.txt" 2> "$R/stderr.txt"
echo "exit $?"
tail -5 "$R/stderr.txt"
head -60 "$R/stdout.txt"
rm -f "$R"/ddp_straggler/rank*/et.json.gz
tar czf "$OUT/ranks.tgz" -C /tmp ranks
du -sh "$R"/ddp_straggler/* "$OUT/ranks.tgz"
