"""Shared helpers for the tests: the installed `tensight` command, fixture paths, checks.

The suite tests the INSTALLED package (`python3 -m pip install .`): the `tensight`
console script next to this interpreter (or on PATH) and `import tensight`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
REAL = FIXTURES / "real"
PROBE = FIXTURES / "h200-probe"
PROBE_TRACE = PROBE / "kineto_trace.json.gz"

# Inputs that are profiler output, but not a Kineto trace.
EXECUTION_TRACES = sorted(REAL.glob("*_et.json.gz")) + [PROBE / "execution_trace.json.gz"]
NCU_CSVS = sorted(PROBE.glob("ncu_*.csv.gz"))
# Every Kineto trace among the fixtures.
KINETO_TRACES = sorted(p for p in REAL.glob("*.json.gz") if p not in EXECUTION_TRACES) + [PROBE_TRACE]

# Text that means a crash instead of a user-facing error.
CRASH_MARKERS = ("panicked", "Traceback", "RUST_BACKTRACE")
SECTIONS = ("GPU PERFORMANCE DIAGNOSIS REPORT", "EXECUTIVE SUMMARY", "DETECTED BOTTLENECKS")


def _command() -> str:
    # TENSIGHT_BIN: a binary to test instead (a developer's `cargo build` output).
    if os.environ.get("TENSIGHT_BIN"):
        return os.environ["TENSIGHT_BIN"]
    here = Path(sys.executable).parent / "tensight"
    found = str(here) if here.exists() else shutil.which("tensight")
    if found is None:
        pytest.exit("the `tensight` command is not installed: run `python3 -m pip install .`", 2)
    return found


TENSIGHT = _command()


def run(*args: str | os.PathLike[str], env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed `tensight` with `args`; stdout and stderr captured as text."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "RUST_BACKTRACE")}
    full_env.update(env or {})
    return subprocess.run(
        [TENSIGHT, *map(str, args)],
        capture_output=True, text=True, env=full_env, cwd=cwd, timeout=60, check=False,
    )


def assert_no_crash(r: subprocess.CompletedProcess[str]) -> None:
    """No panic, traceback or backtrace advice on either stream."""
    for marker in CRASH_MARKERS:
        assert marker not in r.stderr, f"{marker!r} on stderr:\n{r.stderr}"
        assert marker not in r.stdout, f"{marker!r} on stdout:\n{r.stdout}"


def assert_user_error(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one `error:` line (optionally followed by one
    `hint:` line) on stderr, containing each of `needles`. Returns the error line."""
    assert_no_crash(r)
    assert r.returncode == 2, f"exit {r.returncode}, stderr:\n{r.stderr}"
    assert r.stdout == "", f"stdout should be empty on error:\n{r.stdout}"
    lines = r.stderr.splitlines()
    assert 1 <= len(lines) <= 2, f"want `error:` (+ `hint:`), got:\n{r.stderr}"
    assert lines[0].startswith("error: "), r.stderr
    if len(lines) == 2:
        assert lines[1].startswith("hint: "), r.stderr
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


def assert_full_report(text: str) -> None:
    """The text report with its main sections."""
    for s in SECTIONS:
        assert s in text, f"section {s!r} missing from the report:\n{text[:2000]}"


@lru_cache(maxsize=None)
def analyze_json(path: Path) -> dict[str, Any]:
    """`tensight analyze PATH --format json`, parsed (cached: several tests read it)."""
    r = run("analyze", path, "--format", "json")
    assert_no_crash(r)
    assert r.returncode == 0, f"exit {r.returncode} on {path}:\n{r.stderr}"
    report: dict[str, Any] = json.loads(r.stdout)
    return report


def assert_primary_is_largest_saving(diagnosis: dict[str, Any]) -> None:
    """`primary_bottleneck` is the finding with the largest saving (roofline findings are
    informational), or null when no finding saves time."""
    primary = diagnosis["primary_bottleneck"]
    saving = [b["saving_ms"] for b in diagnosis["bottlenecks"] if b["category"] != "roofline"]
    savings = [b["saving_ms"] for b in diagnosis["bottlenecks"]]
    assert savings == sorted(savings, reverse=True), "bottlenecks: largest saving first"
    if primary is None:
        assert all(s <= 0 for s in saving), diagnosis["bottlenecks"]
    else:
        assert primary in diagnosis["bottlenecks"]
        assert primary["saving_ms"] > 0 and primary["saving_ms"] == max(saving)
