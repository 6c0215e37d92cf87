#!/usr/bin/env bash
# Smoke test for the hold-out set H: set B's script over this folder's programs.
#   bash holdout_h/smoke.sh [--device cpu] [--python PY] [--only NAME[,NAME...]]
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOLDOUT_SET="$HERE" exec bash "$HERE/../holdout_b/smoke.sh" "$@"
