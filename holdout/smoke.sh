#!/usr/bin/env bash
# Smoke test of every hold-out program: plain, --fixed, every single --fix NAME,
# and a traced run (--trace + --et). Checks that the last stderr line is a
# parseable HOLDOUT_RESULT, that the chrome trace loads as JSON with events and
# that the execution trace loads as JSON.
#
#   bash holdout/smoke.sh                 # all programs, default device
#   bash holdout/smoke.sh --device cpu    # force CPU
#   ONLY="gelu_bias_bench adam_manual" bash holdout/smoke.sh
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
EXTRA=("$@")
TMP="$(mktemp -d /tmp/holdout_smoke.XXXXXX)"
PER_RUN_TIMEOUT="${PER_RUN_TIMEOUT:-180}"

if [ -n "${ONLY:-}" ]; then
  PROGS=($ONLY)
else
  PROGS=($("$PY" -c "import json,sys; print(' '.join(p['name'] for p in json.load(open('$HERE/programs.json'))))"))
fi

check_result() { # stderr-file expected-program expected-fixes-json
  "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys
path, prog, fixes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
lines = [l for l in open(path, errors="replace").read().splitlines() if l.strip()]
if not lines or not lines[-1].startswith("HOLDOUT_RESULT "):
    print("last stderr line is not HOLDOUT_RESULT: %r" % (lines[-1] if lines else None)); sys.exit(1)
r = json.loads(lines[-1][len("HOLDOUT_RESULT "):])
for key in ("program", "fixes", "iters", "iter_ms", "timing"):
    if key not in r:
        print("missing key", key); sys.exit(1)
if r["program"] != prog:
    print("program mismatch", r["program"]); sys.exit(1)
if r["fixes"] != sorted(fixes) or r["fixes"] != sorted(r["fixes"]):
    print("fixes mismatch", r["fixes"], "expected", sorted(fixes)); sys.exit(1)
if not (isinstance(r["iter_ms"], (int, float)) and r["iter_ms"] > 0):
    print("bad iter_ms", r["iter_ms"]); sys.exit(1)
print("%.3f" % r["iter_ms"])
EOF
}

check_trace() { # chrome-trace et-trace
  "$PY" - "$1" "$2" <<'EOF'
import gzip, json, sys
tr, et = sys.argv[1], sys.argv[2]
op = gzip.open if tr.endswith(".gz") else open
with op(tr, "rt") as f:
    d = json.load(f)
ev = d.get("traceEvents", []) if isinstance(d, dict) else d
if len(ev) < 10:
    print("trace has only %d events" % len(ev)); sys.exit(1)
with open(et) as f:
    e = json.load(f)
nodes = e.get("nodes", [])
if not nodes:
    print("execution trace has no nodes"); sys.exit(1)
print("%d events, %d et nodes" % (len(ev), len(nodes)))
EOF
}

printf "%-24s %-14s %-6s %s\n" PROGRAM RUN STATUS DETAIL
fails=0
total=0
for prog in "${PROGS[@]}"; do
  src="$HERE/$prog.py"
  fixnames=$("$PY" -c "
import json
for p in json.load(open('$HERE/programs.json')):
    if p['name'] == '$prog':
        print(' '.join(q['fix'] for q in p['problems'] if q['fix'] != 'all'))
")
  allfixes=$("$PY" -c "
import json
for p in json.load(open('$HERE/programs.json')):
    if p['name'] == '$prog':
        f = [q['fix'] for q in p['problems']]
        print(json.dumps(sorted(f)))
")
  runs=("plain" "fixed")
  for f in $fixnames; do runs+=("fix:$f"); done
  runs+=("trace")
  for run in "${runs[@]}"; do
    total=$((total + 1))
    out="$TMP/$prog.$run.out"; err="$TMP/$prog.$run.err"
    trace="$TMP/$prog.trace.json.gz"; et="$TMP/$prog.et.json"
    expect="[]"
    case "$run" in
      plain) cmd=("$PY" "$src" --iters 8) ;;
      fixed) cmd=("$PY" "$src" --iters 8 --fixed); expect="$allfixes" ;;
      fix:*) n="${run#fix:}"; cmd=("$PY" "$src" --iters 8 --fix "$n"); expect="[\"$n\"]" ;;
      trace) rm -f "$trace" "$et"; cmd=("$PY" "$src" --iters 14 --trace "$trace" --trace-iters 2 --et "$et") ;;
    esac
    t0=$(date +%s.%N)
    timeout "$PER_RUN_TIMEOUT" "${cmd[@]}" "${EXTRA[@]}" >"$out" 2>"$err"
    rc=$?
    secs=$(printf "%.1f" "$(echo "$(date +%s.%N) - $t0" | bc)")
    if [ $rc -ne 0 ]; then
      printf "%-24s %-14s %-6s rc=%d %ss: %s\n" "$prog" "$run" FAIL "$rc" "$secs" "$(tail -n 1 "$err")"
      fails=$((fails + 1)); continue
    fi
    if ! detail=$(check_result "$err" "$prog" "$expect"); then
      printf "%-24s %-14s %-6s %s\n" "$prog" "$run" FAIL "$detail"; fails=$((fails + 1)); continue
    fi
    if [ "$run" = trace ]; then
      if ! tdetail=$(check_trace "$trace" "$et"); then
        printf "%-24s %-14s %-6s %s\n" "$prog" "$run" FAIL "$tdetail"; fails=$((fails + 1)); continue
      fi
      detail="$detail ms; $tdetail"
    else
      detail="$detail ms"
    fi
    printf "%-24s %-14s %-6s %s (%ss)\n" "$prog" "$run" PASS "$detail" "$secs"
  done
done
echo "$((total - fails)) passed, $fails failed"
rm -rf "$TMP"
[ $fails -eq 0 ]
