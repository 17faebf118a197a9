"""The conformance harness on tool environments: it calls the tools, checks verdicts and the oracle's tool use."""

from dataclasses import dataclass
from typing import Literal

from turnrl.envs import Task, ToolEnv
from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.conformance.tool_checks import arguments, candidates
from turnrl.tools import ToolError, tool
from turnrl.tools.base import Tool, ToolOutput
from turnrl.types import ToolCall
from turnrl.verifiers import Verdict
from turnrl.verifiers.math import verify

TASKS = [Task(id="t0", prompt="What is 6 / 3?", answer="2", metadata={"a": 6, "b": 3})]


def boxed(text, reference):
    return verify(text, reference, answer_format="boxed")


class DivEnv(ToolEnv):
    """Division with a tool; subclasses break one thing each."""

    def __init__(self, tools, verifier=boxed, **options):
        super().__init__(TASKS, tools=tools, verifier=verifier, **options)

    def oracle_calls(self, task):
        return [ToolCall(name=self.tools[0].name, arguments=task.metadata)]

    def format_answer(self, answer):
        return f"\\boxed{{{answer}}}"


@tool
def careful_divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: the dividend.
        b: the divisor.
    """
    if b == 0:
        raise ToolError("b must not be 0")
    return a / b


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b (forgets that b may be 0)."""
    return a / b


def failures(report):
    return "\n".join(report.failures)


def test_a_well_behaved_tool_env_passes():
    report = check_environment(DivEnv([careful_divide]))
    assert report.ok, str(report)
    assert "tool 'careful_divide': 6 generated call(s) ran, 3 malformed call(s) refused" in report.notes
    oracle = [ep for ep in report.episodes if ep.agent == "oracle"]
    assert len(oracle) == 2 and all(ep.tool_calls == 1 and ep.correct == [None, True] for ep in oracle)


def test_a_tool_that_raises_on_valid_input_is_reported():
    report = check_environment(DivEnv([divide]))
    assert not report.ok
    assert (
        "tool 'divide' raised ZeroDivisionError: float division by zero on valid arguments "
        '{"a": 1.5, "b": 0}; fix it, or raise turnrl.tools.ToolError'
    ) in failures(report)


def test_a_verifier_that_returns_no_verdict_is_reported():
    env = DivEnv([careful_divide], verifier=lambda text, reference: reference in text)
    report = check_environment(env)
    assert (
        "grading a wrong answer raised TypeError: the verifier of DivEnv returned bool (False), not a Verdict: "
        "return turnrl.verifiers.Verdict(correct=ok, score=1.0 if ok else 0.0)"
    ) in failures(report)
    assert "(and " in str(report)  # the same error in every episode is shown once, with a count


def test_an_oracle_that_never_uses_the_tools_is_reported():
    class Lazy(DivEnv):
        def oracle_calls(self, task):
            return []

    report = check_environment(Lazy([careful_divide]))
    assert [f.split(":")[0] for f in report.failures] == [
        "the oracle never called a tool although the env offers careful_divide"
    ]


def test_an_oracle_tool_call_that_fails_is_reported():
    class Clumsy(DivEnv):
        def oracle_calls(self, task):
            return [ToolCall(name="careful_divide", arguments={"a": 1, "b": 0})]

    report = check_environment(Clumsy([careful_divide]))
    assert "oracle agent (episode 0), step 0: Error: b must not be 0 — the oracle's own tool call failed" in failures(
        report
    )


def test_a_tool_that_accepts_malformed_calls_is_reported():
    class Lenient(Tool):
        def invoke(self, call):
            return ToolOutput("fine")

    report = check_environment(DivEnv([Lenient(careful_divide.fn, name="careful_divide")]))
    text = failures(report)
    assert "tool 'careful_divide' accepted an unexpected argument" in text
    assert "tool 'careful_divide' accepted the required argument 'a' missing" in text
    assert "tool 'careful_divide' accepted 'a' of the wrong type" in text


def test_tools_that_are_not_tools_are_reported():
    class Odd(DivEnv):
        @property
        def tools(self):
            return [careful_divide, len]

    report = check_environment(Odd([careful_divide], describe_tools=False), episodes=1)
    assert "env.tools holds <built-in function len>, not a turnrl Tool: decorate the function with @tool" in failures(
        report
    )


def test_call_tools_false_skips_the_calls():
    report = check_environment(DivEnv([divide]), call_tools=False)
    assert report.ok, str(report)


def test_generated_arguments_follow_the_schema():
    @dataclass
    class Point:
        x: int
        y: int

    @tool
    def place(
        unit: Literal["m", "km"], point: Point, tags: list[str], scale: float = 2.0, note: str | None = None
    ) -> str:
        """Place a point."""
        return f"{unit} {point} {tags} {scale} {note}"

    params = place.schema()["function"]["parameters"]
    defs = params.get("$defs", {})
    sets = [arguments(params, defs, i) for i in range(6)]
    assert all(set(s) == {"unit", "point", "tags"} for s in sets[::2])  # required only
    assert all(set(s) == {"unit", "point", "tags", "scale", "note"} for s in sets[1::2])  # and the optional ones
    assert {s["unit"] for s in sets} == {"m", "km"}
    for s in sets:
        place.args_model.model_validate(s)  # every generated set is valid input
    assert candidates({"type": "integer", "examples": [42]}, {})[0] == 42


def test_verdict_type_checked_where_the_env_grades():
    env = DivEnv([careful_divide], verifier=lambda text, reference: Verdict(correct=True, score=1.0))
    env.reset(seed=0)
    assert env.score("anything").correct


DATES_ENV = '''
import datetime

import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.tools import tool
from turnrl.types import ToolCall
from turnrl.verifiers import Verdict


@tool
def weekday(date: str) -> str:
    """The weekday of a date.

    Args:
        date: the date as YYYY-MM-DD.
    """
    return datetime.date.fromisoformat(date).strftime("%A")


def exact(text, reference):
    return Verdict(correct=text.strip() == reference, score=float(text.strip() == reference))


class DatesEnv(ToolEnv):
    """Which weekday was it?"""

    def __init__(self, split="train", **options):
        days = {"train": ["2024-01-01", "2024-02-29"], "test": ["2023-07-04"]}[split]
        tasks = [Task(id=d, prompt=f"Which weekday was {d}?", answer=datetime.date.fromisoformat(d).strftime("%A"),
                      metadata={"date": d}) for d in days]
        super().__init__(tasks, tools=[weekday], verifier=exact, **options)
        self.split, self.held_out_split = split, HELD_OUT

    def oracle_calls(self, task):
        return [ToolCall(name="weekday", arguments={"date": task.metadata["date"]})]

    def format_answer(self, answer):
        return answer


turnrl.register("usertest/Dates-v0", "MODULE:DatesEnv")
'''


def _envs_check(tmp_path, held_out):
    import subprocess
    import sys
    import uuid

    module = f"dates_{uuid.uuid4().hex[:8]}"
    text = DATES_ENV.replace("MODULE", module).replace("HELD_OUT", repr(held_out))
    (tmp_path / f"{module}.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "turnrl", "envs", "check", f"{module}:usertest/Dates-v0"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


def test_a_tool_that_raises_value_error_on_a_meaningless_value_is_a_warning_not_a_failure(tmp_path):
    """A user's date tool given "a": at run time the model reads the ValueError as the tool's answer, so
    `turnrl envs check` warns (with the advice) and passes; before, it failed the environment (exit 1)."""
    out = _envs_check(tmp_path, "test")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "usertest/Dates-v0: OK, 1 warning(s)" in out.stdout
    warn = next(line for line in out.stdout.splitlines() if line.startswith("  WARN "))
    assert warn.startswith(
        "  WARN tool 'weekday' raised ValueError: Invalid isoformat string: 'a' on schema-valid "
        'arguments {"date": "a"}; the model reads \'Error: weekday failed: ValueError: '
    )
    assert "raise turnrl.tools.ToolError('what to change')" in warn
    assert "FAIL" not in out.stdout


def test_an_environment_without_a_held_out_split_is_warned_about(tmp_path):
    out = _envs_check(tmp_path, None)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "usertest/Dates-v0: OK, 2 warning(s)" in out.stdout
    assert (
        "  WARN no held-out split (held_out_split is None): `turnrl eval` and a training run's held-out " in out.stdout
    )
    assert 'self.split, self.held_out_split = split, "test"' in out.stdout
    report = check_environment(DivEnv([careful_divide]))
    assert report.ok and report.warnings == [report.warnings[0]] and "no held-out split" in report.warnings[0]
