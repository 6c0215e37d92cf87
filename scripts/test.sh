#!/usr/bin/env bash
# Install what the tests need, then run every test: Rust (fmt, clippy, unit,
# integration and snapshot tests) and Python (the installed `tensight` command and API).
# CI runs exactly this (.ci/run). Needs: Rust (stable), Python 3.10+ with pip.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
echo "== installing test tools (maturin, pytest, mypy, torch for the collector tests) and tensight itself"
"$PY" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" "pytest>=7" "mypy>=1.8" torch
"$PY" -m pip install --quiet --disable-pip-version-check .

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
