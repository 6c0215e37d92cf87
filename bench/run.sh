#!/usr/bin/env bash
# Ingest benchmark: how fast `tensight analyze` reads a >= 1 GB Kineto trace, and its
# peak memory. See bench/README.md.
#
#   bench/run.sh                 # build, make bench/out/big_trace.json if missing, time
#   RUNS=7 GB=2.0 bench/run.sh   # more runs; a 2 GB trace (bench/out/big_trace_2.0gb.json)
#   TRACE=path.json bench/run.sh # time another trace
#
# Times, over RUNS runs (median; one untimed warm-up run first, so the file is in the
# page cache for all of them):
#   analyze  target/release/tensight analyze FILE --format json (stdout to /dev/null;
#            `-o /dev/null` is refused: not a regular file)
#            (the whole command; skipped with a note if the CLI does not build or work)
#   reader   target/release/examples/read_bench FILE (tensight::read::load only)
# Prints a table and writes bench/out/results.json.
set -euo pipefail

cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
GB=${GB:-1.0}
OUT=bench/out
mkdir -p "$OUT"
if [[ -z "${TRACE:-}" ]]; then
    if [[ "$GB" == "1.0" ]]; then TRACE=$OUT/big_trace.json; else TRACE=$OUT/big_trace_${GB}gb.json; fi
fi

echo "== build (release)" >&2
cargo build --release -p tensight --example read_bench >&2
cli_ok=1
cargo build --release -p tensight-cli >&2 || cli_ok=0

if [[ ! -f "$TRACE" ]]; then
    echo "== make $TRACE ($GB GB)" >&2
    python3 bench/make_trace.py --gb "$GB" -o "$TRACE" >&2
fi

TIME=${TIME_BIN:-/usr/bin/time}
if ! "$TIME" -v true >/dev/null 2>&1; then
    echo "note: GNU time not found (apt-get install -y time): timing with bash, no peak RSS" >&2
    TIME=""
fi

analyze=(target/release/tensight analyze "$TRACE" --format json)
reader=(target/release/examples/read_bench "$TRACE")

# Does the CLI work? (exit 0 or 1 = findings; 2 = error.) Try it on the small source.
if [[ $cli_ok == 1 ]]; then
    rc=0
    target/release/tensight analyze bench/data/nccl_parser_config-nccl_data.json.gz \
        --format json >/dev/null 2>&1 || rc=$?
    if [[ $rc -gt 1 ]]; then cli_ok=0; fi
fi
[[ $cli_ok == 1 ]] || echo "note: tensight analyze does not build or work yet: timing the reader only" >&2

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME CMD...: one warm-up, then RUNS timed runs, each writing $tmp/NAME.N
run() {
    local name=$1
    shift
    echo "== $name: $* (1 warm-up + $RUNS runs)" >&2
    "$@" >/dev/null 2>&1 || true
    for i in $(seq 1 "$RUNS"); do
        local rc=0
        if [[ -n "$TIME" ]]; then
            "$TIME" -v -o "$tmp/$name.$i" "$@" >/dev/null 2>"$tmp/$name.$i.err" || rc=$?
        else
            local t0 ns
            t0=$(date +%s%N)
            "$@" >/dev/null 2>"$tmp/$name.$i.err" || rc=$?
            ns=$(($(date +%s%N) - t0))
            printf 'Elapsed (wall clock) time (h:mm:ss or m:ss): 0:%d.%09d\n' \
                $((ns / 1000000000)) $((ns % 1000000000)) >"$tmp/$name.$i"
        fi
        if [[ $rc -gt 1 ]]; then
            echo "error: $name exited $rc:" >&2
            cat "$tmp/$name.$i.err" >&2
            exit 2
        fi
    done
}

[[ $cli_ok == 1 ]] && run analyze "${analyze[@]}"
run reader "${reader[@]}"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp" "$TRACE" "$RUNS" "$OUT/results.json" "$load_before" "$load_after" <<'EOF'
import json, os, platform, re, statistics, subprocess, sys

tmp, trace, runs, out, load_before, load_after = sys.argv[1:7]
runs = int(runs)
size = os.path.getsize(trace)

def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        return ""

def parse(path):
    text = open(path).read()
    def field(name):
        m = re.search(re.escape(name) + r":\s*(.+)", text)
        return m.group(1).strip() if m else None
    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    rss = field("Maximum resident set size (kbytes)")
    user, sys_ = field("User time (seconds)"), field("System time (seconds)")
    return {
        "wall_s": secs,
        "peak_rss_mb": int(rss) / 1024 if rss else None,
        "cpu_s": float(user) + float(sys_) if user and sys_ else None,
    }

cpu = ""
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
commit = sh("git", "rev-parse", "--short", "HEAD")
if sh("git", "status", "--porcelain", "--untracked-files=no"):
    commit += "+dirty"
context = {
    "nproc": os.cpu_count(),
    "nproc_available": len(os.sched_getaffinity(0)),
    "cpu": cpu,
    "kernel": platform.release(),
    "rustc": sh("rustc", "--version"),
    "git_commit": commit,
    "loadavg_before": load_before,
    "loadavg_after": load_after,
    "page_cache": "warm (one untimed run first)",
}
results = {"trace": trace, "file_bytes": size, "runs": runs, "context": context, "commands": {}}
for name in ("analyze", "reader"):
    samples = [parse(f"{tmp}/{name}.{i}") for i in range(1, runs + 1) if os.path.exists(f"{tmp}/{name}.{i}")]
    if not samples:
        continue
    wall = statistics.median(s["wall_s"] for s in samples)
    rss = [s["peak_rss_mb"] for s in samples if s["peak_rss_mb"] is not None]
    cpu_s = [s["cpu_s"] for s in samples if s["cpu_s"] is not None]
    results["commands"][name] = {
        "median_wall_s": round(wall, 3),
        "min_wall_s": round(min(s["wall_s"] for s in samples), 3),
        "gb_per_s": round(size / 1e9 / wall, 3),
        "median_cpu_s": round(statistics.median(cpu_s), 3) if cpu_s else None,
        "median_peak_rss_mb": round(statistics.median(rss), 1) if rss else None,
        "rss_over_file_size": round(statistics.median(rss) * 2**20 / size, 3) if rss else None,
        "wall_s": [round(s["wall_s"], 3) for s in samples],
    }
json.dump(results, open(out, "w"), indent=2)

print()
print(f"trace  {trace}  ({size / 1e9:.3f} GB)")
print(f"host   {context['nproc']} CPUs ({cpu}), {context['rustc']}, commit {commit}")
print(f"load   {load_before} before, {load_after} after (1/5/15-minute averages)")
print()
hdr = f"{'command':<9} {'file GB':>8} {'median s':>9} {'min s':>7} {'GB/s':>6} {'CPU s':>6} {'peak RSS MB':>12} {'RSS/file':>9}"
print(hdr)
print("-" * len(hdr))
for name, r in results["commands"].items():
    rss = f"{r['median_peak_rss_mb']:.0f}" if r["median_peak_rss_mb"] is not None else "n/a"
    ratio = f"{r['rss_over_file_size']:.2f}" if r["rss_over_file_size"] is not None else "n/a"
    cpu_s = f"{r['median_cpu_s']:.2f}" if r["median_cpu_s"] is not None else "n/a"
    print(f"{name:<9} {size / 1e9:>8.3f} {r['median_wall_s']:>9.3f} {r['min_wall_s']:>7.3f} {r['gb_per_s']:>6.3f} {cpu_s:>6} {rss:>12} {ratio:>9}")
print()
print(f"(median of {runs} runs; written to {out})")
EOF
