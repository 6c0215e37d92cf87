#!/usr/bin/env bash
# Install what the tests need (Python tools, Chromium for the HTML report), then run every test: Rust (fmt, clippy, unit,
# integration and snapshot tests) and Python (the installed `tensight` command and API).
# CI runs exactly this (.ci/run). Needs: Rust (stable), Python 3.10+ with pip.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
echo "== installing test tools (maturin, pytest, mypy, torch for the collector tests) and tensight itself"
"$PY" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" "pytest>=7" "mypy>=1.8" torch
"$PY" -m pip install --quiet --disable-pip-version-check .

echo "== chromium (headless, for the HTML report's browser test)"
if command -v chromium >/dev/null 2>&1; then
    echo "chromium: $(chromium --version 2>/dev/null || echo installed)"
elif command -v apt-get >/dev/null 2>&1; then
    # A failed install fails the run: with apt-get at hand the browser test must run.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || { sleep 5; apt-get update -qq; }
    apt-get install -y -qq chromium >/dev/null
    echo "chromium: $(chromium --version 2>/dev/null || echo installed)"
else
    echo "chromium: not installed and no apt-get here: tests/python/test_html_report.py skips"
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --quiet -p tensight -p tensight-record -p tensight-cli
echo "== mypy (the Python that runs in the user's interpreter)"
"$PY" -m mypy --ignore-missing-imports python/tensight
echo "== pytest"
"$PY" -m pytest -q tests/python
