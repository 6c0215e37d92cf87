#!/usr/bin/env bash
# Install what the tests need (Python tools, Chromium for the HTML report), then run every test: Rust (fmt, clippy, unit,
# integration and snapshot tests) and Python (the installed `tensight` command and API).
# CI runs exactly this (.ci/run). Needs: Rust (stable), Python 3.10+ with pip.
# Everything Python goes into a virtual environment of its own, .venv-test/ (made on the
# first run, reused after; TENSIGHT_TEST_VENV picks another folder), so nothing is
# installed into the interpreter you run it with.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE="${PYTHON:-python3}"
VENV="${TENSIGHT_TEST_VENV:-.venv-test}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "== making the test environment $VENV ($("$BASE" --version))"
    "$BASE" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check --progress-bar off)
echo "== installing test tools (maturin, pytest, mypy; numpy and torch for the collector tests: ~2 min)"
"${PIP[@]}" --upgrade pip 2>&1 | grep -E "^(Successfully|Requirement already)" | tail -1 || true
# pip's own lines (Collecting, Downloading, Installing) are the progress here.
"${PIP[@]}" "maturin>=1.5,<2" "pytest>=7" "mypy>=1.8" numpy torch 2>&1 \
    | grep -E "^(Collecting|Downloading|Installing|Successfully)" | cut -c1-100 || true
"$PY" -c "import torch, pytest, mypy, maturin" || { echo "test tools failed to install" >&2; exit 1; }
echo "== installing Ray for the scale-out tests (tests/python/test_ray.py; tensight[ray]: ~20 s)"
"${PIP[@]}" "ray>=2.9" 2>&1 | grep -E "^(Collecting|Downloading|Installing|Successfully)" | cut -c1-100 || true
"$PY" -c "import ray" || { echo "ray failed to install" >&2; exit 1; }
echo "== building tensight's wheel (Rust, release: a few minutes; cargo shows its progress)"
rm -rf target/test-wheel
"$PY" -m maturin build --release --interpreter "$PY" --out target/test-wheel
"${PIP[@]}" --force-reinstall --no-deps target/test-wheel/tensight-*.whl | tail -1

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
