#!/bin/sh
# Run fuzz targets one after another, one job each, for SECS seconds each:
#   fuzz/run.sh SECS TARGET...
# New inputs go to fuzz/corpus-work/TARGET (ignored); the committed seeds in
# fuzz/corpus/TARGET are read, never written. Logs: fuzz/logs/TARGET.log.
set -u
cd "$(dirname "$0")"
secs=$1; shift
mkdir -p logs
for t in "$@"; do
  mkdir -p "corpus-work/$t"
  RAYON_NUM_THREADS=1 cargo +nightly fuzz run -s none "$t" "corpus-work/$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=20 -rss_limit_mb=3072 -max_len=16384 \
    -print_final_stats=1 > "logs/$t.log" 2>&1
  echo "$t exit $?" >> logs/summary.txt
done
