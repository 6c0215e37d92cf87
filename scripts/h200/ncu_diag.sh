#!/usr/bin/env bash
# Why does the hardware pass's collector not run under ncu? Probes the boot hook there.
set -uo pipefail
OUT=${OUT:-/tmp/tensight-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/diag.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/tensight-*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
BOOT=/tmp/site/tensight/_boot
cat > /tmp/probe.py <<'PY'
import os, sys, threading, time
sc = sys.modules.get("sitecustomize")
print("pid", os.getpid(), "ppid", os.getppid(), "owner", os.environ.get("TENSIGHT_OWNER_PID"), "flags", sys.flags.no_site, sys.flags.isolated)
print("sc", getattr(sc, "__file__", None), "installed", getattr(sc, "_installed", "?"))
print("meta_path", [type(m).__module__ + "." + type(m).__name__ for m in sys.meta_path])
print("threads", [t.name for t in threading.enumerate()])
import torch
time.sleep(0.5)
print("after torch: installed", getattr(sc, "_installed", "?"), "threads", [t.name for t in threading.enumerate()])
import tensight.collect as c
print("active", c._active)
print("preload", os.environ.get("LD_PRELOAD"), "inj", os.environ.get("CUDA_INJECTION64_PATH"))
PY
for under in "" "ncu --target-processes all --nvtx --nvtx-include tensight_step/"; do
  echo "=== probe under: '${under:-plain}'"
  rm -rf /tmp/diagb; mkdir -p /tmp/diagb
  TENSIGHT_BUNDLE=/tmp/diagb TENSIGHT_HARDWARE=1 TENSIGHT_HARDWARE_STEP=3 TENSIGHT_STOP=1 PYTHONPATH=$BOOT:/tmp/site \
    $under python3 -X importtime /tmp/probe.py 2> /tmp/imports.txt | grep -v '^==' ; grep -v "import time" /tmp/imports.txt | grep -iv "^==\|^$" | grep -v "import time:" | head -5
  grep "import time:" /tmp/imports.txt | grep -i "numba\|sitecustom\|tensight\|redirect\|_distutils\|torch$" | head -12
done
