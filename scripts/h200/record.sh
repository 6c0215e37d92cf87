#!/usr/bin/env bash
# Records the real-GPU fixtures of `tensight run` on the H200 device machine and measures
# profiling overhead. Run from the repo root there, with the wheel built here carried in
# .whl/ (maturin build --release -o .whl). Writes under $OUT: bundles.tgz (every bundle
# with its report), timing.jsonl (unprofiled step times) and a summary table on stdout.
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/tensight-*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
B=/tmp/bundles
rm -rf "$B"; mkdir -p "$B"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

WORKLOADS="${WORKLOADS:-sync_in_loop late_migration fp32_gemm launch_bound}"
cd workloads
for w in $WORKLOADS; do
  for v in "" "--fixed"; do
    python3 "$w.py" $v --steps 40 >/dev/null 2>>"$OUT/timing.jsonl"
  done
  ( time python3 -m tensight run --steps 5 --warmup 5 --stop --out "$B/$w" -- python3 "$w.py" --steps 40 ) \
    >"$B/$w.stdout" 2>"$B/$w.stderr"
  echo "$w: exit $? $(tail -1 "$B/$w.stderr")"
done
cd ..

# ResNet-50 training (torchvision), batch 32, fp32: unprofiled step time, then profiled.
python3 - <<'PY' 2>>"$OUT/timing.jsonl"
import json, sys, torch
from tensight.models import build
model, make_batch, loss_fn = build("resnet50", 32, torch.device("cuda"))
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
ev = []
for i in range(30):
    e = torch.cuda.Event(enable_timing=True); e.record(); ev.append(e)
    loss = loss_fn(model, make_batch()); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
e = torch.cuda.Event(enable_timing=True); e.record(); ev.append(e); torch.cuda.synchronize()
t = sorted(a.elapsed_time(b) for a, b in zip(ev[10:], ev[11:]))
print(json.dumps({"workload": "resnet50_bs32", "fixed": False, "steps": 30, "median_step_ms": round(t[len(t)//2], 4)}), file=sys.stderr)
PY
for n in 20 4; do
  ( time python3 -m tensight bench --model resnet50 --batch-size 32 --steps $n --out "$B/resnet50_s$n" ) \
    >"$B/resnet50_s$n.stdout" 2>"$B/resnet50_s$n.stderr"
  echo "resnet50 steps $n: exit $? $(tail -1 "$B/resnet50_s$n.stderr")"
done

# Overhead of the profiler's options on the two host-bound cases: the same run with
# module names and allocator events off, and with stacks off too (TENSIGHT_NO).
for no in "modules,memory" "stack,modules,memory"; do
  tag=$(echo "$no" | tr ',' '-')
  TENSIGHT_NO="$no" python3 -m tensight run --steps 5 --warmup 5 --stop --out "$B/opt_launch_bound_$tag" -- \
    python3 workloads/launch_bound.py --steps 40 >/dev/null 2>&1
  TENSIGHT_NO="$no" python3 -m tensight bench --model resnet50 --batch-size 32 --steps 5 \
    --out "$B/opt_resnet50_$tag" >/dev/null 2>&1
done

tar czf "$OUT/bundles.tgz" -C /tmp bundles
ls -la "$OUT"
echo "== unprofiled (timing.jsonl)"; cat "$OUT/timing.jsonl" | grep '^{' || true
echo "== profiled (report step time, mean)"
for d in "$B"/*/; do
  [ -f "$d/report.json" ] && python3 -c "
import json,sys; r=json.load(open('$d/report.json')); s=r['summary']; p=r['diagnosis']['primary_bottleneck']
print(f\"{'$d'.split('/')[-2]:<34} {s['step_time_ms']:8.3f} ms  busy {s['gpu_busy_pct']:5.1f}%  primary {p['code'] if p else '-'} {p['saving_ms'] if p else 0:.2f} ms\")"
done
echo "== profiled (manifest timing)"
for m in "$B"/*/manifest.json; do
  python3 - "$m" <<'PY'
import json, sys, statistics
m = json.load(open(sys.argv[1])); t = m.get("timing") or {}
p = t.get("step_ms_profiled") or []; u = t.get("step_ms_unprofiled") or []
print(f"{sys.argv[1].split('/')[-2]:<22} status={m['program']['status']:<9} steps={m['steps_recorded']} "
      f"profiled median={statistics.median(p) if p else float('nan'):.3f} ms  warm-up median={statistics.median(u) if u else float('nan'):.3f} ms")
PY
done
du -sh "$B"/*/ | sort -h
