"""User agent programs: what they get, what they return, and how they are run with a timeout.

A program is a Python function named ``"module:function"`` or a command. It gets an OpenAI ``base_url`` (a session
of the gateway), an API key and a task, talks to the policy through any OpenAI-compatible client, and returns one
of:

* a number — the episode's reward;
* a string — its final answer, which the task's environment grades (the reward and ``correct`` are the
  environment's, as in a native episode);
* a dict with ``reward`` (a number) and/or ``answer`` (a string), and optionally ``correct`` (a bool).

A function is called as ``function(base_url, api_key, task)`` (an ``async def`` is run in its own event loop). A
command is run with the environment variables ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL`` (the
same session without ``/v1``, which the ``anthropic`` SDK adds itself), ``ANTHROPIC_API_KEY``, ``TURNRL_TASK`` (the
task as JSON) and ``TURNRL_SESSION``, and its last line of standard output is the result (JSON, or a plain answer).
The task is ``{"id", "index", "messages", "question", "tools", "model"}``: the environment's opening messages in
OpenAI's form, the last user message's text, the environment's tool schemas (empty when it has none) and the model
name to ask for; with ``program.mcp_tools`` also ``mcp_url``, where an MCP client calls those tools
(:mod:`turnrl.gateway.tools`; ``TURNRL_MCP_URL`` for a command). A program never imports the trainer.

Anything else — raising, exiting non-zero, running past its time, returning nothing or a non-number — is an
:class:`Outcome` with an ``error`` that says so (the episode is left out of training and counted).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import shlex
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnrl.utils import import_from

RETURNS = (
    "return a reward (a number), the final answer (a string), or a dict with 'reward' and/or 'answer' "
    "(and optionally 'correct')"
)


@dataclass
class Outcome:
    """What one run of a program came to: a reward, an answer to grade, or an error."""

    reward: float | None = None
    answer: str | None = None
    correct: bool | None = None
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def parse_outcome(value: Any) -> Outcome:
    """A program's return value as an :class:`Outcome` (see the module docstring)."""
    if isinstance(value, bool):
        return Outcome(error=f"the program returned a bool ({value}); {RETURNS}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            return Outcome(error=f"the program returned a reward that is not finite ({value})")
        return Outcome(reward=float(value))
    if isinstance(value, str):
        return Outcome(answer=value)
    if isinstance(value, dict):
        reward, answer, correct = value.get("reward"), value.get("answer"), value.get("correct")
        if reward is None and answer is None:
            return Outcome(
                error=f"the program returned a dict without 'reward' or 'answer' (keys {sorted(value)}); {RETURNS}"
            )
        if reward is not None and (
            isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward)
        ):
            return Outcome(error=f"the program's reward is not a finite number: {reward!r}")
        if answer is not None and not isinstance(answer, str):
            return Outcome(error=f"the program's answer is not a string: {answer!r}")
        if correct is not None and not isinstance(correct, bool):
            return Outcome(error=f"the program's 'correct' is not a bool: {correct!r}")
        return Outcome(
            reward=None if reward is None else float(reward),
            answer=answer,
            correct=correct,
            info={k: v for k, v in value.items() if k not in ("reward", "answer", "correct")},
        )
    if value is None:
        return Outcome(error=f"the program returned None; {RETURNS}")
    return Outcome(error=f"the program returned a {type(value).__name__}; {RETURNS}")


class ProgramError(ValueError):
    """A program that cannot be loaded (a one-line message for the user)."""


def load_function(spec: str, search: Sequence[str | Path] = ()) -> Callable[..., Any]:
    """The function ``"module:function"`` names; the module is looked up on ``sys.path``, then in ``search``.

    Raises:
        ProgramError: the spec is malformed, the module cannot be imported, or it has no such callable.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ProgramError(f"a program function is named 'module:function' (e.g. my_agent:run), got {spec!r}")
    try:
        module = _import(module_name, search)
    except ProgramError:
        raise
    except Exception as e:  # importing user code may raise anything
        raise ProgramError(f"importing the program's module {module_name!r} raised {type(e).__name__}: {e}") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ProgramError(
            f"module {module_name!r} has no function {attr!r}"
            + ("" if fn is None else f" ({attr} is a {type(fn).__name__})")
        )
    return fn


def _import(name: str, search: Sequence[str | Path]) -> Any:
    module = import_from(name, search)
    if module is not None:
        return module
    top = name.split(".")[0]
    raise ProgramError(
        f"no module named {name!r} on sys.path"
        + "".join(f" or in {p}" for p in search)
        + f"; run from the folder that holds {top}.py or add that folder to PYTHONPATH"
    )


def call_function(fn: Callable[..., Any], base_url: str, api_key: str, task: dict[str, Any], timeout: float) -> Outcome:
    """Run ``fn(base_url, api_key, task)`` in its own thread and wait at most ``timeout`` seconds (a program still
    running then is abandoned: its session is closed, so its next call is refused)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            value = fn(base_url, api_key, task)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            box["value"] = value
        except BaseException as e:  # reported as the episode's error
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True, name="turnrl-program")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return Outcome(error=f"the program ran past its timeout ({timeout:g}s)")
    if "error" in box:
        e = box["error"]
        return Outcome(error=f"the program raised {type(e).__name__}: {e}")
    return parse_outcome(box.get("value"))


async def _awaited(value: Any) -> Any:
    return await value


def run_command(
    command: str | Sequence[str], base_url: str, api_key: str, task: dict[str, Any], session: str, timeout: float
) -> Outcome:
    """Run a program command (see the module docstring) and read its last line of standard output."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    env = {
        **os.environ,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": api_key,
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": api_key,
        "TURNRL_TASK": json.dumps(task),
        "TURNRL_SESSION": session,
        **({"TURNRL_MCP_URL": task["mcp_url"]} if task.get("mcp_url") else {}),
    }
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(error=f"the program ran past its timeout ({timeout:g}s) and was killed")
    except OSError as e:
        return Outcome(error=f"the program command {argv[:1]} cannot run: {e}")
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return Outcome(error=f"the program exited with status {done.returncode}" + (f": {tail}" if tail else ""))
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        return Outcome(error=f"the program printed nothing; print its result as the last line ({RETURNS})")
    try:
        value = json.loads(lines[-1])
    except json.JSONDecodeError:
        value = lines[-1].strip()
    return parse_outcome(value)
