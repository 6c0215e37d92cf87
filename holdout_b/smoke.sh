#!/usr/bin/env bash
# Smoke test for the hold-out set B: runs every program (planted, --fixed, each --fix,
# and one traced run) and checks the HOLDOUT_RESULT line, the chrome trace and the ET.
#   bash holdout_b/smoke.sh [--device cpu] [--python PY] [--only NAME[,NAME...]]
# Set C runs this same script on its own folder (HOLDOUT_SET; holdout_c/smoke.sh).
set -u
HERE="${HOLDOUT_SET:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
DEVICE=cpu
PY="${PYTHON:-python3}"
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
# a loaded CPU box makes multi-threaded OpenMP spin badly; timings on CPU mean nothing anyway
if [ "$DEVICE" = cpu ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi
export PYTHONUNBUFFERED=1
exec "$PY" - "$HERE" "$DEVICE" "$ONLY" <<'PYEOF'
import gzip, json, os, subprocess, sys, tempfile, time

here, device, only = sys.argv[1], sys.argv[2], sys.argv[3]
programs = json.load(open(os.path.join(here, "programs.json")))
if only:
    keep = set(only.split(","))
    programs = [p for p in programs if p["name"] in keep]
tmp = tempfile.mkdtemp(prefix=os.path.basename(here) + "_smoke_")
rows, failures = [], 0


def run(prog, extra, iters):
    cmd = [sys.executable, os.path.join(here, prog + ".py"), "--device", device, "--iters", str(iters)] + extra
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = "timeout", (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    return rc, err, time.time() - t


def check_result(err, prog, want_fixes, iters):
    lines = [l for l in err.splitlines() if l.strip()]
    if not lines or not lines[-1].startswith("HOLDOUT_RESULT "):
        return "last stderr line is not HOLDOUT_RESULT: %r" % (lines[-1][:200] if lines else "")
    try:
        res = json.loads(lines[-1][len("HOLDOUT_RESULT "):])
    except Exception as e:
        return "bad json: %s" % e
    for key in ("program", "fixes", "iters", "iter_ms", "timing"):
        if key not in res:
            return "missing key %s" % key
    if res["program"] != prog:
        return "program %r" % res["program"]
    if res["fixes"] != want_fixes:
        return "fixes %r, expected %r" % (res["fixes"], want_fixes)
    if res["iters"] != iters:
        return "iters %r" % res["iters"]
    if not isinstance(res["iter_ms"], (int, float)) or not res["iter_ms"] > 0:
        return "iter_ms %r" % res["iter_ms"]
    return None


def load_json(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


for n, p in enumerate(programs):
    name = p["name"]
    variants = [("planted", [], [])]
    if p["control"]:
        variants.append(("--fixed", ["--fixed"], []))
    else:
        variants.append(("--fixed", ["--fixed"], sorted(p["fixes"]) if p["fixes"] else ["all"]))
        for f in p["fixes"]:
            variants.append(("--fix " + f, ["--fix", f], [f]))
    for label, extra, want in variants:
        rc, err, dt = run(name, extra, 8)
        msg = "exit %s" % rc if rc != 0 else check_result(err, name, want, 8)
        if msg and rc != 0:
            msg += ": " + " | ".join(err.strip().splitlines()[-3:])[:300]
        rows.append((name, label, "FAIL" if msg else "ok", "%.0fs" % dt, msg or ""))
        failures += bool(msg)
    ext = ".json.gz" if n % 2 else ".json"
    trace = os.path.join(tmp, name + ".trace" + ext)
    et = os.path.join(tmp, name + ".et.json")
    rc, err, dt = run(name, ["--trace", trace, "--trace-iters", "2", "--et", et], 14)
    msg = "exit %s" % rc if rc != 0 else check_result(err, name, [], 14)
    if not msg:
        try:
            tr = load_json(trace)
            events = tr.get("traceEvents", []) if isinstance(tr, dict) else tr
            if not events:
                msg = "trace has no events"
        except Exception as e:
            msg = "trace: %s" % e
    if not msg:
        try:
            e = load_json(et)
            if not isinstance(e, dict) or not e.get("nodes"):
                msg = "ET has no nodes"
        except Exception as e:
            msg = "ET: %s" % e
    if msg and rc != 0:
        msg += ": " + " | ".join(err.strip().splitlines()[-3:])[:300]
    rows.append((name, "trace+et (%s)" % ext.lstrip("."), "FAIL" if msg else "ok", "%.0fs" % dt, msg or ""))
    failures += bool(msg)
    print("  %-18s done" % name, file=sys.stderr, flush=True)

w = max(len(r[0]) for r in rows)
print("%-*s  %-22s %-5s %6s  %s" % (w, "program", "run", "check", "time", "detail"))
for r in rows:
    print("%-*s  %-22s %-5s %6s  %s" % (w, r[0], r[1], r[2], r[3], r[4]))
print("%d runs, %d failed (device %s)" % (len(rows), failures, device))
sys.exit(1 if failures else 0)
PYEOF
