"""The accuracy harness: run on a GPU machine, from the repo root, with tensight installed.

For each workload it measures the unprofiled median step time with and without
``--fixed``, runs ``tensight run`` on the unfixed variant, and records the primary
finding, its estimated saving and whether the expected rule fired. It writes
``workloads/results.json`` and ``workloads/RESULTS.md``.

    python3 workloads/harness.py                 # every workload
    python3 workloads/harness.py --only fp32_gemm late_migration
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: workload -> the rule that must be the primary bottleneck (None: a control, where no
#: CRITICAL or SEVERE finding may appear).
EXPECTED: dict[str, str | None] = {
    "sync_in_loop": "S001",
    "late_migration": "C003",
    "fp32_gemm": "T001",
    "launch_bound": "L001",
    "pageable_h2d": "D001",
    "cpu_preprocessing": "C004",
    "device_ping_pong": "C002",
    "dataloader_starvation": "D003",
    "small_grid": "O001",
    "misaligned_bf16": "T002",
    "unfused_chain": "G001",
    "transposed_view": "V001",
    "allocator_churn": "A002",
    "control_bf16_gemm": None,
    "control_resnet50": None,
    "real_gpt": None,
}


def unprofiled_ms(name: str, fixed: bool, steps: int) -> float | None:
    cmd = [sys.executable, str(HERE / f"{name}.py"), "--steps", str(steps)] + (["--fixed"] if fixed else [])
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=600)
    for line in reversed(r.stderr.splitlines()):
        if line.startswith("{"):
            return float(json.loads(line)["median_step_ms"])
    print(f"harness: {name} {'fixed' if fixed else 'unfixed'} failed:\n{r.stderr[-2000:]}", file=sys.stderr)
    return None


def diagnose(name: str, steps: int, out: Path) -> dict[str, Any] | None:
    bundle = out / name
    cmd = [sys.executable, "-m", "tensight", "run", "--steps", "5", "--warmup", "5", "--stop",
           "--out", str(bundle), "--format", "json", "--", sys.executable, f"{name}.py", "--steps", str(steps)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=900)
    try:
        return json.loads(r.stdout[r.stdout.index("{"):])
    except ValueError:
        print(f"harness: tensight run {name} failed:\n{r.stderr[-2000:]}", file=sys.stderr)
        return None


def row(name: str, steps: int, out: Path) -> dict[str, Any]:
    before = unprofiled_ms(name, False, steps)
    after = unprofiled_ms(name, True, steps)
    report = diagnose(name, steps, out)
    expected = EXPECTED[name]
    r: dict[str, Any] = {"workload": name, "expected": expected, "unfixed_ms": before, "fixed_ms": after}
    r["measured_saving_ms"] = None if before is None or after is None else round(before - after, 4)
    if report is None:
        return r | {"primary": None, "fired": False, "estimated_saving_ms": None}
    findings = report["diagnosis"]["bottlenecks"]
    primary = report["diagnosis"]["primary_bottleneck"]
    hit = next((f for f in findings if f["code"] == expected), None)
    r |= {
        "primary": primary["code"] if primary else None,
        "fired": hit is not None,
        "estimated_saving_ms": round(hit["saving_ms"], 4) if hit else None,
        "severe_findings": [f["code"] for f in findings if f["severity"] in ("critical", "severe")],
        "profiled_step_ms": report["summary"]["step_time_ms"],
    }
    est, meas = r["estimated_saving_ms"], r["measured_saving_ms"]
    r["within_35pct"] = bool(est is not None and meas and abs(est - meas) <= 0.35 * abs(meas))
    r["ok"] = (r["primary"] == expected) if expected else not r["severe_findings"]
    return r


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | expected | primary | fired | estimated ms | measured ms | within ±35% | ok |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['expected'] or 'control'} | {r.get('primary')} | {r.get('fired')} | "
                     f"{r.get('estimated_saving_ms')} | {r.get('measured_saving_ms')} | {r.get('within_35pct')} | {r.get('ok')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="workloads to run (default: all)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--out", type=Path, default=None, help="where bundles go (default: a temp dir)")
    a = p.parse_args()
    names = a.only or list(EXPECTED)
    unknown = [n for n in names if n not in EXPECTED]
    if unknown:
        p.error(f"unknown workloads: {', '.join(unknown)}")
    out = a.out or Path(tempfile.mkdtemp(prefix="tensight-harness-"))
    rows = []
    for n in names:
        print(f"harness: {n}", file=sys.stderr)
        rows.append(row(n, a.steps, out))
    (HERE / "results.json").write_text(json.dumps({"rows": rows, "device": os.environ.get("HARNESS_DEVICE")}, indent=2) + "\n")
    (HERE / "RESULTS.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
