#!/usr/bin/env bash
# Creates .venv (if missing) and installs turnrl with its test tools. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first, pinned: the CPU build (see DEVELOPERS.md); then the package in editable mode.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
echo "turnrl installed in .venv ($(.venv/bin/python -c 'import turnrl; print(turnrl.__version__)'))"
