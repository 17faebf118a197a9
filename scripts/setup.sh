#!/usr/bin/env bash
# Creates .venv and installs turnrl (editable) with its test tools. Idempotent: re-running after the
# install is a no-op unless pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.turnrl-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -x .venv/bin/turnrl ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pipq() { .venv/bin/python -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
pipq --upgrade pip
# torch pinned first: the CPU build (DEVELOPERS.md); a plain `torch` pulls a multi-GB CUDA build.
pipq "torch==2.13.0"
pipq -e ".[dev]"
echo "$want" > "$stamp"
echo "turnrl $(.venv/bin/python -c 'import turnrl; print(turnrl.__version__)') installed in .venv" >&2
