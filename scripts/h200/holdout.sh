#!/usr/bin/env bash
# Record the hold-out set on the H200 device machine (issue 12), in as many calls as the
# 10-minute limit needs: each call records the programs not yet in the folder it is
# given back (carry it as .holdout/), in EXPECTED.json's order, and stops before BUDGET_S.
#
#   bash scripts/h200/holdout.sh [PROGRAM...]     # default: every program
#   RUNS=1 bash scripts/h200/holdout.sh            # one `tensight run` each (less time)
#   SET=holdout_b bash scripts/h200/holdout.sh     # another set (its folder)
#   KEEP=1 SET=holdout_d bash scripts/h200/holdout.sh  # record again, keeping the set's
#                                                     # committed timings.json (no timing)
#
# Carry only .holdout/timings.json (what earlier calls recorded): the programs in it are
# skipped, and $OUT/holdout_NAME.tgz hold only what this call recorded (the 16 MiB a file
# that comes back allows would not hold the whole set).
# Wheel built here in .whl/ (maturin build --release -o .whl). Everything recorded goes
# into $OUT/holdout_NAME.tgz, one per program (unpack each in one folder), the log into
# $OUT/log.txt. At most 8 files come back from a call: record at most 6 programs per call.
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
R=/tmp/holdout; rm -rf "$R"; mkdir -p "$R"
[ -f .holdout/timings.json ] && cp .holdout/timings.json "$R/"   # what earlier calls recorded
timeout $((BUDGET_S - 20)) python3 holdout/harness.py --out "$R" --skip-done --record-only --runs "${RUNS:-2}" \
  --set "${SET:-holdout}" ${KEEP:+--keep-timings "${SET:-holdout}/timings.json"} \
  ${1:+--only "$@"}
find "$R" -name 'plain_et.json' -exec gzip -f {} \;
# One archive per program (a file that comes back is capped at 16 MiB: one archive of a
# whole call's programs was 18 MB once, and lost), and timings.json beside them.
# An archive still over 15 MB leaves out the plain trace and its ET, then the detail
# steps, and says so (2026-12-05: three archives of 18-63 MB did not come back).
for d in "$R"/*/; do
  n=$(basename "$d"); a="$OUT/holdout_$n.tgz"; ex=()
  tar czf "$a" -C /tmp "holdout/$n"
  for drop in plain.json.gz plain_et.json.gz run1/detail.json.gz run2/detail.json.gz; do
    [ "$(stat -c %s "$a")" -le 15000000 ] && break
    [ -f "$R/$n/$drop" ] || continue
    ex+=(--exclude="holdout/$n/$drop"); echo "$n: archive over 15 MB, $drop left out"
    tar czf "$a" "${ex[@]}" -C /tmp "holdout/$n"
  done
done
cp "$R/timings.json" "$OUT/"
du -sh "$R"/* | sort -h | tail -20
