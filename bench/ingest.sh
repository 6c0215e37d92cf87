#!/usr/bin/env bash
# Ingest benchmark across trace shapes: `tensight analyze` end to end on traces made by
# repeating the steps of real traces, against Holistic Trace Analysis on the 100 MB
# ones. See bench/README.md ("Ingest by trace shape").
#
#   bench/ingest.sh               # 4 shapes x {0.1, 1} GB, median of 3, HTA on 0.1 GB
#   bench/ingest.sh --6gb         # also 6 GB per shape (made, timed and deleted in turn)
#   SHAPES="kernel rocm" SIZES="0.1" RUNS=5 HTA=0 bench/ingest.sh
#   KEEP=1 bench/ingest.sh        # keep the 1 GB (and 6 GB) traces in bench/out/ingest/
#   BUILD=0 bench/ingest.sh       # time target/release/tensight as it is (no cargo build)
#
# Shapes (source under ../shared/traces, or SHARED=path/traces):
#   kernel  real/tracelens-inference-vllm_decode_full-graph_execution (graph replay, short kernels)
#   python  real/tracelens-b200-eager_trace (with_stack: Python frames are 62% of events)
#   ops     real/tracelens-h100-gaunernst_bert-small-uncased-1016001 (ops with shapes)
#   rocm    real/amd_trace-mi250_minitoy_train_ROCm6_2_kineto (AMD MI250)
# Each trace is made once by bench/make_trace.py (ignored by git: bench/out/). The
# 100 MB traces are kept; larger ones are deleted after timing unless KEEP=1.
# Timing: one untimed warm-up run (page cache), then RUNS runs under GNU time -v
# (wall, CPU, peak RSS); HTA (`pip install HolisticTraceAnalysis` into
# bench/out/hta-venv, made on first use) runs HTA_RUNS times (default 1): load, temporal
# breakdown, idle time breakdown (bench/hta_bench.py). Prints a table and writes
# bench/out/ingest.json.
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
HTA=${HTA:-1}
HTA_RUNS=${HTA_RUNS:-1}
SIZES=${SIZES:-0.1 1}
SHAPES=${SHAPES:-kernel python ops rocm}
KEEP=${KEEP:-0}
SHARED=${SHARED:-../shared/traces}
[[ -d "$SHARED" ]] || SHARED=../../shared/traces
for a in "$@"; do
    case "$a" in
        --6gb) SIZES="$SIZES 6" ;;
        *) echo "error: unknown argument $a (only --6gb)" >&2; exit 2 ;;
    esac
done
OUT=bench/out/ingest
mkdir -p "$OUT"
TIME=/usr/bin/time
"$TIME" -v true >/dev/null 2>&1 || { echo "error: GNU time is needed for peak RSS" >&2; echo "hint: apt-get install -y time" >&2; exit 2; }

source_of() {
    case "$1" in
        kernel) echo "$SHARED/real/tracelens-inference-vllm_decode_full-graph_execution.json.gz" ;;
        python) echo "$SHARED/real/tracelens-b200-eager_trace.json.gz" ;;
        ops) echo "$SHARED/real/tracelens-h100-gaunernst_bert-small-uncased-1016001.json.gz" ;;
        rocm) echo "$SHARED/real/amd_trace-mi250_minitoy_train_ROCm6_2_kineto.json.gz" ;;
        *) echo "error: unknown shape $1 (kernel, python, ops, rocm)" >&2; exit 2 ;;
    esac
}

if [[ ${BUILD:-1} == 1 ]]; then
    echo "== build (release)" >&2
    cargo build --release -p tensight-cli >&2
fi
BIN=target/release/tensight

if [[ $HTA == 1 && ! -x bench/out/hta-venv/bin/python ]]; then
    echo "== make bench/out/hta-venv (pip install HolisticTraceAnalysis)" >&2
    python3 -m venv bench/out/hta-venv
    bench/out/hta-venv/bin/pip install -q HolisticTraceAnalysis >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows.jsonl

# timed NAME CMD...: RUNS runs under GNU time, each written to $tmp/NAME.N
timed() {
    local name=$1 n=$2
    shift 2
    for i in $(seq 1 "$n"); do
        local rc=0
        "$TIME" -v -o "$tmp/$name.$i" "$@" >"$tmp/$name.$i.out" 2>"$tmp/$name.$i.err" || rc=$?
        if [[ $rc -gt 1 ]]; then
            echo "error: $name exited $rc:" >&2
            tail -5 "$tmp/$name.$i.err" >&2
            exit 2
        fi
    done
}

for shape in $SHAPES; do
    src=$(source_of "$shape")
    for gb in $SIZES; do
        trace=$OUT/${shape}_${gb}gb.json
        if [[ ! -f "$trace" ]]; then
            echo "== make $trace ($gb GB from $(basename "$src"))" >&2
            python3 bench/make_trace.py --source "$src" --gb "$gb" -o "$trace" >&2
        fi
        echo "== $shape $gb GB: tensight analyze (1 warm-up + $RUNS runs)" >&2
        "$BIN" analyze "$trace" --format json >/dev/null 2>&1 || true
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        timed "t_${shape}_$gb" "$RUNS" "$BIN" analyze "$trace" --format json
        hta_n=0
        if [[ $HTA == 1 && $gb == 0.1 ]]; then
            echo "== $shape $gb GB: HTA ($HTA_RUNS runs)" >&2
            timed "h_${shape}_$gb" "$HTA_RUNS" bench/out/hta-venv/bin/python bench/hta_bench.py "$trace"
            hta_n=$HTA_RUNS
        fi
        python3 bench/ingest_row.py "$tmp" "$shape" "$gb" "$trace" "$RUNS" "$hta_n" "$load" >>"$rows"
        if [[ $gb != 0.1 && $KEEP != 1 ]]; then rm -f "$trace"; fi
    done
done

python3 bench/ingest_row.py --table "$rows" bench/out/ingest.json
