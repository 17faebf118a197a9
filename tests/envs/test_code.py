import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import turnrl
from turnrl.envs.builtin.code import CodeEnv, humaneval_tasks
from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.data import DataFormatError
from turnrl.tools.python import python_tool
from turnrl.tools.sandbox import E2BSandbox, LocalSandbox, SandboxUnavailable
from turnrl.types import ToolCall
from turnrl.verifiers.code import extract_code, run_tests, trim_traceback

SOLUTION = "def add(a, b):\n    return a + b\n"


def test_run_tests_script_mode():
    assert run_tests(SOLUTION, "assert add(1, 2) == 3").correct
    v = run_tests("def add(a, b):\n    return a - b\n", "assert add(1, 2) == 3, 'add(1, 2) should be 3'")
    assert not v.correct and v.score == 0.0 and "add(1, 2) should be 3" in v.details["feedback"]


def test_run_tests_list_mode_counts_and_explains():
    tests = ["assert add(1, 2) == 3", "assert add(0, 0) == 1", "assert add(-1, 1) == 0", "assert undefined()"]
    v = run_tests(SOLUTION, tests)
    assert not v.correct and v.score == pytest.approx(0.5)
    assert v.details["passed"] == 2 and "2 of 4 tests failed" in v.details["feedback"]
    assert "assert add(0, 0) == 1" in v.details["feedback"]
    assert run_tests(SOLUTION, tests[:1] + tests[2:3]).correct
    with pytest.raises(ValueError, match="empty"):
        run_tests(SOLUTION, [])


@pytest.mark.parametrize(
    "cheat",
    [
        "import os\nos._exit(0)",  # exit before the tests run
        "import sys\nsys.exit(0)",
        "print('__turnrl_tests_done_0000000000000000__')\nimport os\nos._exit(0)",
    ],
)
def test_exiting_early_does_not_pass(cheat):
    assert not run_tests(SOLUTION + cheat, "assert add(1, 2) == 4").correct
    assert not run_tests(SOLUTION + cheat, ["assert add(1, 2) == 4"]).correct


def test_crashing_or_hanging_solutions():
    v = run_tests("raise ImportError('nope')", "assert True")
    assert not v.correct and "ImportError: nope" in v.details["feedback"]
    v = run_tests("while True:\n    pass", ["assert True"], timeout=1)
    assert not v.correct and ("timeout" in v.details["feedback"] or "CPU" in v.details["feedback"])


def test_extract_code_and_trim():
    assert extract_code("text\n```python\nx = 1\n```\nmore\n```\ny = 2\n```") == "y = 2\n"
    assert extract_code("no code") is None
    tb = (
        "Traceback (most recent call last):\n"
        + "\n".join(f'  File "x", line {i}' for i in range(30))
        + "\nValueError: bad"
    )
    assert trim_traceback(tb).endswith("ValueError: bad") and len(trim_traceback(tb).splitlines()) == 12


def test_python_tool():
    py = python_tool(LocalSandbox(cpu_seconds=2), timeout=5)
    assert py.schema()["function"]["name"] == "python"
    assert py.invoke(ToolCall(name="python", arguments={"code": "print(6 * 7)"})).content == "42"
    out = py.invoke(ToolCall(name="python", raw="import sys\nprint('x', file=sys.stderr)\nsys.exit(2)")).content
    assert "[stderr]\nx" in out and "[exit status 2]" in out
    assert (
        "[stopped: wall-clock timeout" in py.invoke(ToolCall(name="python", raw="import time\ntime.sleep(30)")).content
    )


def test_humaneval_env_conforms_and_all_canonical_solutions_pass():
    env = turnrl.make("turnrl/HumanEval-v0")
    assert len(env) == 164
    report = check_environment(env)
    assert report.ok, str(report)
    failed = []
    for i in range(0, 164, 8):  # every 8th problem (all 164 take ~4 s)
        env.reset(options={"index": i})
        if not env.score(env.oracle_action()).correct:
            failed.append(env.task.id)
    assert failed == []


def test_humaneval_multi_turn_feedback_and_body_only_answers():
    env = turnrl.make("turnrl/HumanEval-v0", max_turns=2)
    env.reset(options={"index": 0})
    obs, r, term, _trunc, _info = env.step(
        "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    )
    assert (
        (r, term) == (0.0, False)
        and "AssertionError" in obs[0].content
        and "check(has_close_elements)" in obs[0].content
    )
    body = (
        "```python\n    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```"
    )
    _, r, term, _, _ = env.step(body)
    assert (r, term) == (1.0, True)
    env.reset(options={"index": 0})
    obs, r, *_ = env.step("I would loop over pairs.")
    assert r == 0.0 and "No code block found" in obs[0].content


def test_code_env_from_jsonl(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    rows = [
        {"id": "sq", "prompt": "Write square(x).", "tests": ["assert square(2) == 4", "assert square(-3) == 9"]},
        {"prompt": "Write triple(x).", "tests": "assert triple(3) == 9", "setup": "import math"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = CodeEnv.from_jsonl(path, partial_credit=True)
    env.reset(options={"index": 0})
    _, r, *_ = env.step("```python\ndef square(x):\n    return x * 2\n```")
    assert r == 0.5  # one of two asserts passes
    env.reset(options={"index": 1})
    _, r, *_ = env.step("```python\ndef triple(x):\n    return int(math.prod([x, 3]))\n```")
    assert r == 1.0 and env.task.id == "mbpp/1"
    path.write_text('{"prompt": "x"}\n')
    with pytest.raises(DataFormatError, match="needs a 'prompt' string and 'tests'"):
        CodeEnv.from_jsonl(path)


def test_humaneval_tasks_have_tests():
    tasks = humaneval_tasks()
    assert tasks[0].id == "HumanEval/0" and "check(has_close_elements)" in tasks[0].metadata["tests"]


# ---- E2B, up to the network boundary ----


def test_e2b_needs_a_key(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(SandboxUnavailable, match="E2B_API_KEY"):
        E2BSandbox()


class RefusingE2B(BaseHTTPRequestHandler):
    """Stands in for E2B's API on 127.0.0.1: every request is refused as unauthorized."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = b'{"code": 401, "message": "Invalid API key"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST


def test_e2b_failure_is_an_answer_not_a_crash():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RefusingE2B)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        sb = E2BSandbox(
            api_key="e2b_" + "0" * 40, api_url=f"http://127.0.0.1:{httpd.server_address[1]}", request_timeout=5
        )
        r = sb.run("print(1)", timeout=5)
        assert r.exit_code is None and r.error.startswith("E2B: could not create a sandbox")
        assert "401" in r.error or "Invalid API key" in r.error or "Authentication" in r.error
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_format_answer_submits_the_given_program_and_the_oracle_the_solution():
    tasks = [{"prompt": "Write add(a, b).", "tests": ["assert add(1, 2) == 3"], "solution": SOLUTION}]
    env = CodeEnv(
        [
            {"prompt": t["prompt"], "answer": "", "metadata": {"tests": t["tests"], "solution": t["solution"]}}
            for t in tasks
        ]
    )
    env.reset()
    wrong = "def add(a, b):\n    return a - b\n"
    assert extract_code(env.format_answer(wrong)).strip() == wrong.strip()  # not the reference solution
    assert not env.score(env.format_answer(wrong)).correct
    assert env.format_answer("  ") is None
    assert env.score(env.oracle_action()).correct
