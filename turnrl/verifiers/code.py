"""Code verification: run a solution's tests in a sandbox and turn the result into a Verdict.

``run_tests(code, tests)`` accepts tests as one script (HumanEval's ``check(candidate)``, or plain asserts: the
solution passes if the whole script runs to its end) or as a list of assert statements (each is run and counted;
the score is the fraction passed). Failures come back in ``details["feedback"]``: the first failing assertion, the
error and where it was raised, ready to show the model.

The tests run in the hardened harness ``turnrl/verifiers/harness.py`` (see ``docs/REWARD_HACKING.md``): the verdict
cannot be forged or skipped by the code under test, values it returns must be plain, and what it tried is reported
in ``details["tampering"]`` (a count; ``details["tampering_events"]`` names them). Any tampering scores 0.

Its namesake :mod:`turnrl.envs.builtin.code` is the same concept a layer up: the environments that pose code tasks
and grade them here.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from pathlib import Path
from typing import Any

from turnrl.tools.sandbox.base import ExecResult, Sandbox
from turnrl.tools.sandbox.local import default_test_sandbox
from turnrl.verifiers.base import Verdict

HARNESS = (Path(__file__).with_name("harness.py")).read_text(encoding="utf-8")
VERDICT_PREFIX = "TURNRL-VERDICT "

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


def _budget(timeout: float) -> float:
    """Seconds the harness gives the solution and its tests: the timeout less the interpreter's start-up margin."""
    return max(timeout - max(0.3, 0.15 * timeout), 0.1)


def _read_verdict(stdout: str, token: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    """The harness's authenticated verdict in ``stdout`` (or None), and the problems met reading it.

    A verdict line whose MAC does not match is a forgery attempt (reported as tampering); several different valid
    verdicts are impossible from the harness and are refused.
    """
    verdicts, problems = [], []
    for line in stdout.splitlines():
        if VERDICT_PREFIX not in line:
            continue
        mac, _, body = line[line.index(VERDICT_PREFIX) + len(VERDICT_PREFIX) :].partition(" ")
        expected = hmac.new(token, body.encode("utf-8", "surrogateescape"), "sha256").hexdigest()
        if not hmac.compare_digest(mac.encode("ascii", "replace"), expected.encode("ascii")):
            problems.append("a forged verdict line on stdout")
            continue
        verdicts.append(body)
    if len(set(verdicts)) != 1:
        if len(set(verdicts)) > 1:
            problems.append("several different verdicts")
        return None, problems
    try:
        verdict = json.loads(verdicts[0])
    except ValueError:
        return None, [*problems, "an unreadable verdict"]
    ok = (
        isinstance(verdict, dict)
        and isinstance(verdict.get("results"), list)
        and isinstance(verdict.get("tampering"), list)
        and all(
            isinstance(r, list) and len(r) == 2 and isinstance(r[0], bool) and isinstance(r[1], str)
            for r in verdict["results"]
        )
    )
    return (verdict if ok else None), problems if ok else [*problems, "a malformed verdict"]


def _no_verdict(result: ExecResult, total: int, problems: list[str]) -> Verdict:
    """The run ended without a verdict: it was stopped, crashed, or ended itself. Never a pass."""
    reason = (
        result.error
        or trim_traceback(result.stderr)
        or (f"the program ended before the tests finished (exit status {result.exit_code})")
    )
    details: dict[str, Any] = {
        "feedback": reason,
        "passed": 0,
        "total": total,
        "exit_code": result.exit_code,
        "error": result.error,
        "tampering": len(problems),
    }
    if problems:
        details["tampering_events"] = problems
    return Verdict(correct=False, score=0.0, details=details)


def _verdict(verdict: dict[str, Any], tests: list[str], script: bool, problems: list[str]) -> Verdict:
    results, tampering = verdict["results"], [str(t) for t in verdict["tampering"]] + problems
    total = len(tests)
    if verdict.get("error") or len(results) != total:
        reason = str(verdict.get("error") or f"the harness reported {len(results)} results for {total} tests")
        return Verdict(
            correct=False,
            score=0.0,
            details={"feedback": reason, "passed": 0, "total": total, "error": reason, "tampering": len(tampering)},
        )
    passed = sum(ok for ok, _ in results)
    details: dict[str, Any] = {"passed": passed, "total": total, "tampering": len(tampering)}
    failed = [(t, fb) for t, (ok, fb) in zip(tests, results) if not ok]
    if failed:
        test, feedback = failed[0]
        details["feedback"] = (
            feedback if script else (f"{len(failed)} of {total} tests failed. First failure:\n{test}\n{feedback}")
        )
    if tampering:
        details["tampering_events"] = tampering
        details["feedback"] = (
            "The verifier refused what the code under test tried: "
            + "; ".join(tampering[:5])
            + (f"\n{details['feedback']}" if failed else "")
        )
        return Verdict(correct=False, score=0.0, details=details)
    return Verdict(correct=not failed, score=passed / total, details=details)


def run_tests(
    code: str,
    tests: str | list[str],
    *,
    sandbox: Sandbox | None = None,
    timeout: float = 10.0,
    files: dict[str, str] | None = None,
    entry_point: str | None = None,
    trusted_code: str | None = None,
) -> Verdict:
    """Run ``tests`` against ``code`` in ``sandbox`` (default: a shared LocalSandbox without ``/proc``) through the
    hardened harness.

    Args:
        code: the solution's source (any text: whatever it is, the answer is a Verdict).
        tests: a test script (passes if it runs to its end), or a list of assert statements (each counted).
        timeout: wall-clock seconds for the whole run.
        files: extra files for the run's directory.
        entry_point: the function under test (HumanEval's); its results, like those of every function of the
            solution the tests name, must be plain values.
        trusted_code: task code (e.g. HumanEval's prompt) whose definitions the tests use instead of the solution's,
            except ``entry_point``: a solution cannot redefine the helpers the tests rely on.

    Returns:
        A Verdict: ``correct`` if all tests pass and nothing was tampered with; ``score`` the fraction passed (1/0
        for a script; 0 on tampering); ``details`` with ``passed``, ``total``, ``tampering`` (a count; with
        ``tampering_events``) and ``feedback`` (the first failure) when something failed.

    Raises:
        ValueError, TypeError: ``tests`` is empty or not a str/list of str, or ``code`` is not a str.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    script = isinstance(tests, str)
    test_list = [tests] if isinstance(tests, str) else tests
    if not isinstance(test_list, list) or not all(isinstance(t, str) for t in test_list):
        raise TypeError(f"tests must be a str or a list of str, got {type(tests).__name__}")
    if not test_list:
        raise ValueError("tests is an empty list: nothing would be checked")
    token = secrets.token_hex(32)
    job = {
        "solution": code,
        "tests": test_list,
        "script": script,
        "entry_point": entry_point,
        "trusted": trusted_code,
        "budget": _budget(timeout),
    }
    stdin = token + "\n" + json.dumps(job, ensure_ascii=True)
    try:
        result = (sandbox or default_test_sandbox()).run(HARNESS, timeout=timeout, stdin=stdin, files=files)
    except Exception as e:  # a sandbox that fails is an answer, not a crash in a rollout
        return Verdict(
            correct=False,
            score=0.0,
            details={
                "feedback": f"the sandbox failed: {type(e).__name__}: {e}",
                "passed": 0,
                "total": len(test_list),
                "error": f"{type(e).__name__}: {e}",
                "tampering": 0,
            },
        )
    verdict, problems = _read_verdict(result.stdout, token.encode("ascii"))
    if verdict is None:
        return _no_verdict(result, len(test_list), problems)
    return _verdict(verdict, test_list, script, problems)
