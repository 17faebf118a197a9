#!/usr/bin/env bash
# Sets up .venv if needed, then runs the test suite. Extra arguments go to pytest.
#   bash scripts/test.sh          the whole suite (what CI runs), in TURNRL_TEST_WORKERS processes (default 2;
#                                 pytest-xdist, each test module kept in one process for its shared fixtures)
#   bash scripts/test.sh --fast   the fast tier for inner loops: every test module, without the tests
#                                 tests/slow_tests.txt lists (over 1 s in a timed run; scripts/slow_tests.py)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the linter first (its rules and the reasons for those left out: [tool.ruff] in pyproject.toml); it takes a second
.venv/bin/ruff check --quiet . || { echo "ruff found the problems above: fix them (\`.venv/bin/ruff check --fix .\` fixes some)" >&2; exit 1; }
if [[ "${1:-}" == "--fast" ]]; then
    shift
    exec .venv/bin/python -m pytest -q -m "not slow" "$@"
fi
exec .venv/bin/python -m pytest -q -n "${TURNRL_TEST_WORKERS:-2}" --dist loadfile "$@"
