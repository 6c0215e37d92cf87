#!/usr/bin/env python3
"""A stand-in for Nsight Compute's `ncu` (no GPU in CI): `fake_ncu.py [OPTIONS] -- CMD...`.

Saves its argv as JSON to $FAKE_NCU_ARGS (when set), runs CMD with its stdio and the
environment less PYTHONPATH and TENSIGHT_*, then writes `==PROF==` lines and the recorded CSV
(tests/fixtures/h200-probe/ncu_raw.csv.gz) to the `--log-file` path, as ncu does, and
exits with CMD's code. `FAKE_NCU_FAIL=1` plays a machine without counter permission:
the `==ERROR== ERR_NVGPUCTRPERM` message and exit code 1, CMD not run.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

CSV = Path(__file__).resolve().parents[2] / "fixtures" / "h200-probe" / "ncu_raw.csv.gz"


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2099.1.0.0 (fake)")
        return 0
    if os.environ.get("FAKE_NCU_ARGS"):
        Path(os.environ["FAKE_NCU_ARGS"]).write_text(json.dumps(argv), encoding="utf-8")
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1:]
    log = Path(opts[opts.index("--log-file") + 1])
    if os.environ.get("FAKE_NCU_FAIL") == "1":
        log.write_text("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user "
                       "does not have permission to access NVIDIA GPU Performance Counters on "
                       "the target device 0.\n", encoding="utf-8")
        return 1
    # Worse than the real ncu (2025.3 on an H200 passed the environment through): none of
    # tensight's variables get through, so the test sees `tensight` set them again with
    # `env`. Like the real one, this launcher is Python and runs the boot hook, which
    # must not make it the run's owner (it never imports torch).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TENSIGHT_")}
    code = subprocess.run(cmd, env=env, check=False).returncode
    with gzip.open(CSV, "rt", encoding="utf-8") as f:
        body = f.read()
    log.write_text(f"==PROF== Connected to process 1\n{body}==PROF== Disconnected\n",
                   encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
