#!/usr/bin/env bash
# Digest of `tensight analyze --format json` on every real trace, the 20 MB bench
# traces and the recorded H200 bundles (workloads and hold-out sets, the rules' real cases), to check that a speed change leaves every diagnosis byte-identical:
#   bench/same_output.sh > /tmp/before.txt; (change, rebuild); bench/same_output.sh | diff /tmp/before.txt -
# BIN=path picks the binary (default target/release/tensight).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/tensight}
SHARED=${SHARED:-../shared/traces}
[[ -d "$SHARED" ]] || SHARED=../../shared/traces
for f in "$SHARED"/real/*.json* "$SHARED"/h200-probe/*.json* bench/out/ingest/*_20mb.json; do
    [[ -f "$f" ]] || continue
    sum=$("$BIN" analyze "$f" --format json 2>/dev/null | sha256sum | cut -c1-16)
    echo "$sum $(basename "$f")"
done
for d in tests/fixtures/workloads/*/ tests/fixtures/holdout*/*/run1/; do
    [[ -f "$d/manifest.json" ]] || continue
    sum=$("$BIN" analyze "$d" --format json 2>/dev/null | sha256sum | cut -c1-16)
    echo "$sum $d"
done
