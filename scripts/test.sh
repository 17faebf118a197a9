#!/usr/bin/env bash
# Sets up .venv if needed, then runs the test suite. Extra arguments go to pytest.
#   bash scripts/test.sh          the whole suite (what CI runs), in TURNRL_TEST_WORKERS processes (default 2;
#                                 pytest-xdist, each test module kept in one process for its shared fixtures)
#   bash scripts/test.sh --fast   the fast tier for inner loops: every test module, without the tests
#                                 tests/slow_tests.txt lists (over 1 s in a timed run; scripts/slow_tests.py)
# Either way the linter runs first and the type checker beside the tests; the script fails if any of them does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# bytecode caches written even where the environment says not to (PYTHONDONTWRITEBYTECODE): every process the suite
# starts — the pytest processes, each collecting every module, Ray's workers, `turnrl` subprocesses — imports
# turnrl, and without caches each one compiles again every module changed since the caches were last written
unset PYTHONDONTWRITEBYTECODE
# the linter first (its rules and the reasons for those left out: [tool.ruff] in pyproject.toml); it takes a second
.venv/bin/ruff check --quiet . || { echo "ruff found the problems above: fix them (\`.venv/bin/ruff check --fix .\` fixes some)" >&2; exit 1; }
# the formatter's check: every Python file as `ruff format` writes it ([tool.ruff.format]; a second)
.venv/bin/ruff format --check --quiet . || { echo "ruff format would change the files above: run \`.venv/bin/ruff format .\`" >&2; exit 1; }
# the type checker ([tool.mypy] in pyproject.toml) beside the tests, at low priority: 17 CPU-seconds from a cold
# cache (a fresh clone, CI; a second from a warm one), too long to wait for before the tests start
mypy_log=$(mktemp)
nice -n 10 .venv/bin/mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
# (the trap stops mypy only while it runs: once waited for, its pid may be another process's)
trap '[[ -n "$mypy_pid" ]] && kill "$mypy_pid" 2>/dev/null; rm -f "$mypy_log"' EXIT
fast=0
args=()
for a in "$@"; do  # --fast anywhere among the arguments; the others go to pytest as given
    if [[ "$a" == "--fast" ]]; then fast=1; else args+=("$a"); fi
done
tests=0
if ((fast)); then
    .venv/bin/python -m pytest -q -m "not slow" ${args[@]+"${args[@]}"} || tests=$?
else
    # modules handed out longest first (tests/module_seconds.txt, tests/conftest.py), not by their number of tests
    .venv/bin/python -m pytest -q -n "${TURNRL_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
        ${args[@]+"${args[@]}"} || tests=$?
fi
types=0
wait "$mypy_pid" || types=$?
mypy_pid=""
if ((types != 0)); then
    cat "$mypy_log" >&2
    echo "mypy found the problems above: fix them (\`.venv/bin/mypy\` checks again; a \`# type: ignore[code]  # why\` only where the code is right)" >&2
fi
if ((tests != 0)); then
    exit "$tests"
fi
exit "$types"
