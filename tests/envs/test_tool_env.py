"""ToolEnv's defaults for a new user: turns, task ids, tool results as JSON, the kwargs a subclass fixes."""

import json
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
from pydantic import BaseModel

import turnrl
from turnrl.envs import InvalidEnvKwargs, Task, ToolEnv, registry
from turnrl.envs.registry import _accepted_kwargs
from turnrl.tools import tool
from turnrl.tools.parsers import HermesParser, TagParser
from turnrl.types import ToolCall
from turnrl.verifiers.math import verify


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return {"pi": "3.14159"}.get(key, "unknown")


def tag_verifier(text, reference):
    return verify(text, reference, answer_format="tag")


TASKS = [{"id": "pi", "prompt": "What is pi to 5 decimals?", "answer": "3.14159"}]
CALL = '<tool_call>{"name": "lookup", "arguments": {"key": "pi"}}</tool_call>'


def test_a_tool_env_without_max_turns_lets_a_tool_result_be_followed_by_an_answer():
    env = ToolEnv(TASKS, tools=[lookup], verifier=tag_verifier)
    assert env.max_turns == 4
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(CALL)
    assert obs[0].content == "3.14159" and not (terminated or truncated)
    _, reward, terminated, truncated, info = env.step("<answer>3.14159</answer>")
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    assert ToolEnv(TASKS, verifier=tag_verifier).max_turns == 1  # one answer, nothing to wait for
    assert ToolEnv(TASKS, verifier=tag_verifier, retry=True).max_turns == 4  # room to retry
    assert ToolEnv(TASKS, tools=[lookup], verifier=tag_verifier, max_turns=2).max_turns == 2


def test_a_task_without_an_id_gets_one_from_its_content():
    a = Task.model_validate({"prompt": "2+2?", "answer": "4"})
    assert a.id.startswith("task-") and len(a.id) == 17
    assert Task.model_validate({"prompt": "2+2?", "answer": "4"}).id == a.id
    assert Task.model_validate({"prompt": "2+3?", "answer": "5"}).id != a.id
    assert Task(prompt="2+2?", answer="4").id == a.id
    env = ToolEnv(TASKS, tools=[lookup], verifier=tag_verifier)
    _, info = env.reset(options={"task": {"prompt": "2+2?", "answer": "4"}})
    assert info["task_id"] == a.id
    with pytest.raises(
        ValueError,
        match=r"options\['task'\] must be a Task or a dict with 'prompt' and 'answer'.*"
        r"got answer: Field required",
    ):
        env.reset(options={"task": {"prompt": "2+2?"}})


def test_tool_results_that_are_not_strings_are_json():
    class Book(BaseModel):
        title: str
        year: int

    @dataclass
    class Hit:
        score: float

    values = {
        "model": Book(title="Emma", year=1815),
        "dataclass": Hit(0.5),
        "set": {2, 1},
        "numpy": np.int64(3),
        "array": np.array([1.5, 2.0]),
        "dict": {"a": None, "b": (1, 2)},
        "text": "as is",
    }

    @tool
    def give(kind: str) -> object:
        """Return a value of some kind."""
        return values[kind]

    shown = {k: give.invoke(ToolCall(name="give", arguments={"kind": k})).content for k in values}
    assert shown == {
        "model": '{"title": "Emma", "year": 1815}',
        "dataclass": '{"score": 0.5}',
        "set": "[1, 2]",
        "numpy": "3",
        "array": "[1.5, 2.0]",
        "dict": '{"a": null, "b": [1, 2]}',
        "text": "as is",
    }
    assert all(json.loads(v) is not None for k, v in shown.items() if k != "text")


@pytest.mark.parametrize("parser", [HermesParser(), TagParser({"search_query": "search"})])
def test_format_call_is_what_the_parser_reads(parser):
    call = ToolCall(name="search", arguments={"query": "Emma author"})
    parsed = parser.parse(parser.format_call(call))
    assert not parsed.errors and len(parsed.calls) == 1
    assert parsed.calls[0].name == "search"
    assert parsed.calls[0].arguments == call.arguments or parsed.calls[0].raw == "Emma author"


def test_accepted_kwargs_leave_out_what_a_subclass_fixes():
    class Fixed(ToolEnv):
        def __init__(self, level: int = 1, **options):
            super().__init__(TASKS, [lookup], tag_verifier, instruction=f"level {level}", **options)

    names, complete, fixed = _accepted_kwargs(Fixed)
    assert complete  # ToolEnv takes no **options: every name is known
    assert fixed == {"tasks": "Fixed", "tools": "Fixed", "verifier": "Fixed", "instruction": "Fixed"}
    assert names == {
        "level",
        "tool_style",
        "system_prompt",
        "max_turns",
        "retry",
        "feedback",
        "describe_tools",
        "render_mode",
    }
    turnrl.register("tooltest/Fixed-v0", Fixed)
    try:
        with pytest.raises(
            InvalidEnvKwargs,
            match=r"does not accept the keyword argument 'tools' \(Fixed sets it "
            r"itself\)\. Accepted: describe_tools, feedback, level, max_turns",
        ):
            turnrl.make("tooltest/Fixed-v0", tools=[])
        env = turnrl.make(
            "tooltest/Fixed-v0",
            level=2,
            system_prompt=None,
            max_turns=None,
            retry=True,
            feedback="No.",
            describe_tools=False,
            tool_style="hermes",
            render_mode="ansi",
        )
        assert env.instruction == "level 2" and env.max_turns == 4  # every accepted kwarg is taken
    finally:
        del gym.registry["tooltest/Fixed-v0"]
        registry._REGISTERED.pop("tooltest/Fixed-v0")
        registry._SOURCES.pop("tooltest/Fixed-v0")
