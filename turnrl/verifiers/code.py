"""Code verification: run a solution's tests in a sandbox and turn the result into a Verdict.

``run_tests(code, tests)`` accepts tests as one script (HumanEval's ``check(candidate)``, or plain asserts: the
solution passes if the script exits 0) or as a list of assert statements (each is run and counted; the score
is the fraction passed). Failures come back in ``details["feedback"]``: the first failing assertion or the
trimmed traceback, ready to show the model.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from turnrl.tools.sandbox.base import ExecResult, Sandbox
from turnrl.tools.sandbox.local import default_sandbox
from turnrl.verifiers.base import Verdict

_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.S)
def extract_code(text: str) -> str | None:
    """The last fenced code block in ``text`` (```python … ``` or ``` … ```), or None if there is none."""
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else None


def trim_traceback(stderr: str, max_lines: int = 12) -> str:
    """The last lines of a traceback (the part that names the failing line and the error)."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join(["Traceback (most recent call last):", "  ...", *lines[-(max_lines - 2) :]])


def _list_harness(code: str, tests: list[str], marker: str) -> str:
    cases = json.dumps(tests)
    return f"""{code}


def __turnrl_run_tests():
    import json as _json, traceback as _tb
    _passed, _failed = 0, []
    for _t in _json.loads({cases!r}):
        try:
            exec(_t, globals())
            _passed += 1
        except AssertionError as _e:
            _failed.append({{"test": _t, "error": "AssertionError" + (": " + str(_e) if str(_e) else "")}})
        except Exception as _e:
            _failed.append({{"test": _t, "error": type(_e).__name__ + ": " + str(_e)}})
    print({marker!r} + _json.dumps({{"passed": _passed, "failed": _failed}}))


__turnrl_run_tests()
"""


def _verdict_from_script(result: ExecResult, marker: str) -> Verdict:
    if result.ok and marker in result.stdout.splitlines()[-1:]:
        return Verdict(correct=True, score=1.0, details={"passed": True})
    reason = result.error or trim_traceback(result.stderr) or (
        f"exit status {result.exit_code}" if result.exit_code else "the program exited before the tests finished"
    )
    return Verdict(correct=False, score=0.0, details={"feedback": reason, "exit_code": result.exit_code,
                                                      "error": result.error})


def _verdict_from_list(result: ExecResult, total: int, marker: str) -> Verdict:
    summary = None
    for line in result.stdout.splitlines():
        if line.startswith(marker):
            summary = json.loads(line[len(marker) :])
            break
    if summary is None:  # the solution itself crashed, or the run was stopped
        reason = result.error or trim_traceback(result.stderr) or "the program ended before the tests ran"
        return Verdict(correct=False, score=0.0, details={"feedback": reason, "passed": 0, "total": total})
    passed, failed = summary["passed"], summary["failed"]
    details: dict[str, Any] = {"passed": passed, "total": total}
    if failed:
        first = failed[0]
        details["feedback"] = f"{len(failed)} of {total} tests failed. First failure:\n{first['test']}\n{first['error']}"
    return Verdict(correct=not failed and passed == total, score=passed / total if total else 0.0, details=details)


def run_tests(
    code: str,
    tests: str | list[str],
    *,
    sandbox: Sandbox | None = None,
    timeout: float = 10.0,
    files: dict[str, str] | None = None,
) -> Verdict:
    """Run ``tests`` against ``code`` in ``sandbox`` (default: a shared LocalSandbox).

    Args:
        code: the solution's source.
        tests: a test script appended to the solution (passes if it exits 0), or a list of assert statements.
        timeout: wall-clock seconds for the whole run.
        files: extra files for the run's directory.

    Returns:
        A Verdict: ``correct`` if all tests pass, ``score`` the fraction passed (1/0 for a script), ``details``
        with ``feedback`` (the first failure, trimmed) when something failed.
    """
    sandbox = sandbox or default_sandbox()
    # A per-run marker that the tests print when they finish: a solution that exits early (os._exit(0)) or
    # prints a fake summary does not pass. (A solution that reads its own source could still find it.)
    marker = f"__turnrl_tests_done_{secrets.token_hex(8)}__"
    if isinstance(tests, list):
        if not tests:
            raise ValueError("tests is an empty list: nothing would be checked")
        result = sandbox.run(_list_harness(code, tests, marker), timeout=timeout, files=files)
        return _verdict_from_list(result, len(tests), marker)
    result = sandbox.run(f"{code}\n\n{tests}\n\nprint({marker!r})\n", timeout=timeout, files=files)
    return _verdict_from_script(result, marker)
