"""A generic tool-use environment: pose a task, run the agent's tool calls, grade its final answer.

With it, a new tool-use environment is a task list, a few ``@tool`` functions and a verifier — see
``examples/unit_converter_env.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from turnrl.envs.core import Obs, StepResult, Task, TaskSource, TextEnv, pick_index
from turnrl.tools.base import Tool, Toolbox, ToolOutput
from turnrl.tools.parsers import ParseResult, ToolCallParser, get_parser
from turnrl.types import Message, ToolCall
from turnrl.utils import Shared
from turnrl.verifiers.base import Verdict

Verifier = Callable[[str, str], Verdict]

TOOL_MAX_TURNS = 4  # the default with tools or retry: room for a few tool calls (or retries) and an answer

DEFAULT_FEEDBACK = "That is not correct. Try again."
NO_ANSWER_FEEDBACK = "No final answer was found in your reply. {instruction}"


class TaskList(Shared, list):
    """A list of :class:`Task` that every fork of its environment shares (read-only data; :mod:`turnrl.envs.fork`)."""


def as_tasks(tasks: TaskSource | Sequence[Task | dict[str, Any]]) -> TaskSource:
    """Accept a task source, or a sequence of :class:`Task` / dicts with ``id``, ``prompt``, ``answer``."""
    if isinstance(tasks, (list, tuple)):
        return TaskList(t if isinstance(t, Task) else Task.model_validate(t) for t in tasks)
    if isinstance(tasks, TaskSource):
        return tasks
    raise TypeError(f"tasks must be a sequence of Task/dict or a TaskSource, got {type(tasks).__name__}")


def _task(task: Any) -> Task:
    """``reset(options={"task": ...})``'s task, or a ValueError that says what a task needs."""
    if isinstance(task, Task):
        return task
    try:
        return Task.model_validate(task)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'task'}: {err['msg']}" for err in e.errors())
        raise ValueError(
            f"options['task'] must be a Task or a dict with 'prompt' and 'answer' strings (optional 'id' — made from "
            f"the content when missing — and 'metadata'); got {problems}"
        ) from None


class ToolEnv(TextEnv):
    """Pose a task, execute the agent's tool calls, grade its final answer with a verifier.

    Each step is one assistant message:

    * if it contains tool calls (or malformed attempts at one), each call runs and its output comes back as a
      ``tool`` message; a malformed or unknown call, bad arguments or a failing tool become an error message
      for the model, and the episode goes on. Reward 0.
    * otherwise the message is the final answer: ``verifier(message, task.answer)`` grades it, and its
      ``score`` is the reward. The episode terminates, unless ``retry`` is on, the answer was wrong and turns
      remain: then the model gets ``feedback`` and answers again.

    The last allowed turn (``max_turns``) is always graded if it holds no tool call, so the episode ends
    ``terminated``; it ends ``truncated`` only when the turn limit cuts it while the agent is still calling tools.

    Args:
        tasks: the tasks (a sequence of :class:`Task` or dicts, or any :class:`TaskSource`).
        tools: the tools the agent may call (``@tool`` functions).
        verifier: ``(response_text, reference) -> Verdict``.
        tool_style: ``"hermes"`` (``<tool_call>{json}</tool_call>``), ``"tags"`` (``<toolname>input</toolname>``)
            or a parser object.
        system_prompt: the system message (None for none). Tool instructions are appended when
            ``describe_tools`` is on.
        instruction: text appended to every task prompt (e.g. where to put the answer).
        max_turns: the most assistant turns per episode; default 1, or 4 when the env has tools or ``retry`` is on
            (so that a tool result can be followed by an answer).
        retry: after a wrong answer, give feedback and let the agent try again while turns remain.
        feedback: the message sent after a wrong answer when ``retry`` is on (a verdict's
            ``details["feedback"]``, e.g. a failing test, is sent instead when present).
        describe_tools: append the tools' descriptions and call format to the system prompt (for chat templates
            that do not render tools themselves).
    """

    #: Few-shot demonstrations, as chat messages placed between the system message and the question (e.g. SWiRL's,
    #: :func:`turnrl.envs.formats.swirl_format.demo_messages`); part of the prompt, never trained on.
    prompt_demos: tuple[Message, ...] = ()

    def __init__(
        self,
        tasks: TaskSource | Sequence[Task | dict[str, Any]],
        tools: Sequence[Tool] = (),
        verifier: Verifier | None = None,
        *,
        tool_style: str | ToolCallParser = "hermes",
        system_prompt: str | None = None,
        instruction: str = "",
        max_turns: int | None = None,
        retry: bool = False,
        feedback: str = DEFAULT_FEEDBACK,
        describe_tools: bool = True,
        render_mode: str | None = None,
    ) -> None:
        if max_turns is None:
            max_turns = TOOL_MAX_TURNS if (len(tools) or retry) else 1
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        if verifier is None or not callable(verifier):
            raise TypeError("ToolEnv needs a verifier: a function (response_text, reference) -> Verdict")
        self.tasks = as_tasks(tasks)
        self.toolbox = Toolbox(tools)
        self.parser = get_parser(tool_style, [t.name for t in self.toolbox])
        self.verifier = verifier
        self.system_prompt = system_prompt
        self.instruction = instruction
        self.retry = bool(retry)
        self.feedback = feedback
        self.describe_tools = describe_tools
        self.task: Task | None = None

    @property
    def tools(self) -> Sequence[Tool]:
        """The tools the agent may call."""
        return list(self.toolbox)

    def __len__(self) -> int:
        return len(self.tasks)

    def task_at(self, index: int) -> Task | None:
        """Task ``index`` of :attr:`tasks`."""
        return self.tasks[index]

    # ---- reset ----

    def system_message(self) -> str | None:
        """The system prompt, with tool instructions appended when tools are described in the prompt."""
        parts = [self.system_prompt] if self.system_prompt else []
        if self.describe_tools and len(self.toolbox):
            parts.append(self.parser.instructions(self.tools))
        return "\n\n".join(parts) or None

    def user_message(self, task: Task) -> str:
        """The task prompt with the instruction appended."""
        return f"{task.prompt}\n\n{self.instruction}" if self.instruction else task.prompt

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        unknown = set(options) - {"index", "task"}
        if unknown:
            raise ValueError(
                f"unknown reset options {sorted(unknown)}; {type(self).__name__} accepts 'index' and 'task'"
            )
        if "task" in options:
            self.task = _task(options["task"])
            index = None
        else:
            index = pick_index(self, len(self.tasks), options)
            self.task = self.tasks[index]
        system = self.system_message()
        obs = (
            ((Message(role="system", content=system),) if system else ())
            + tuple(self.prompt_demos)
            + (Message(role="user", content=self.user_message(self.task)),)
        )
        return obs, {"task_id": self.task.id, "index": index, "role": "policy"}

    # ---- step ----

    def _tool_step(self, parsed: ParseResult, outputs: Sequence[ToolOutput]) -> StepResult:
        messages, error = tool_observation(parsed, outputs)
        info: dict[str, Any] = {
            "role": "policy",
            "correct": None,
            "tool_calls": [c.model_dump() for c in parsed.calls],
            "error": error,
        }
        last = self._turn + 1 >= self.max_turns
        if last:  # cut while still calling tools: the episode's figures are those of no answer (F1 0, not missing)
            info["metrics"] = self.unanswered_metrics()
        return tuple(messages), 0.0, False, last, info

    def unanswered_metrics(self) -> dict[str, float]:
        """The figures of no answer now (F1 0, the searches so far): :meth:`TextEnv.unanswered_metrics`."""
        return self._metrics("") if self.task is not None else {}

    def _metrics(self, response: str) -> dict[str, float]:
        """The numeric details of ``score(response)`` (the report's ``mean_*`` figures); none if it cannot score."""
        try:
            return _numeric(self.score(response))
        except Exception:  # figures only: a verifier that cannot grade "" must not end the episode
            return {}

    def score(self, response: str) -> Verdict:
        """Grade ``response`` as a final answer to the current task (pure: does not advance the episode).

        Raises:
            TypeError: the verifier returned something other than a :class:`~turnrl.verifiers.base.Verdict`.
        """
        if self.task is None:
            raise RuntimeError("no current task; call reset() first")
        verdict = self.verifier(response, self.task.answer)
        if not isinstance(verdict, Verdict):
            raise TypeError(
                f"the verifier of {type(self).__name__} returned {type(verdict).__name__} ({verdict!r:.60}), not a "
                "Verdict: return turnrl.verifiers.Verdict(correct=ok, score=1.0 if ok else 0.0)"
            )
        return verdict

    def _answer_step(self, action: str) -> StepResult:
        verdict = self.score(action)
        info: dict[str, Any] = {
            "role": "policy",
            "correct": verdict.correct,
            "extracted": verdict.extracted,
            "verdict": dict(verdict.details),
            "metrics": _numeric(verdict),
            "tool_calls": [],
            "error": None,
        }
        last = self._turn + 1 >= self.max_turns
        if verdict.correct or not self.retry or last:
            return (), verdict.score, True, False, info
        text = verdict.details.get("feedback") or self.feedback  # a verifier may explain the failure (tests)
        if verdict.extracted is None and not verdict.details.get("feedback"):
            text = NO_ANSWER_FEEDBACK.format(instruction=self.instruction).strip()
        return (Message(role="user", content=text),), verdict.score, False, False, info

    def _parse(self, action: str) -> ParseResult:
        return self.parser.parse(action) if len(self.toolbox) else ParseResult()

    def _step(self, action: str) -> StepResult:
        parsed = self._parse(action)
        if parsed.found:
            return self._tool_step(parsed, [self.toolbox.invoke(c) for c in parsed.calls])
        return self._answer_step(action)

    async def _astep(self, action: str) -> StepResult:
        parsed = self._parse(action)
        if parsed.found:
            outputs = await asyncio.gather(*(self.toolbox.ainvoke(c) for c in parsed.calls))
            return self._tool_step(parsed, outputs)
        return await asyncio.to_thread(self._answer_step, action)

    def oracle_action(self) -> str | None:
        """The next of :meth:`oracle_calls` while turns remain, then the reference answer as :meth:`format_answer`
        writes it (None if it does not know how)."""
        if self.task is None:
            return None
        answer = self.format_answer(self.task.answer)
        calls = self.oracle_calls(self.task)
        write = getattr(self.parser, "format_call", None)
        if answer is not None and self._turn < len(calls) and self._turn + 1 < self.max_turns and write is not None:
            return write(calls[self._turn])
        return answer

    def oracle_calls(self, task: Task) -> list[ToolCall]:
        """The tool calls that solve ``task``, made one per turn before the oracle answers (override; default
        none). The conformance harness checks that an env with tools has an oracle that uses them."""
        return []

    def format_answer(self, answer: str) -> str | None:
        """A response that states ``answer`` the way the verifier expects; None if unknown (override)."""
        return None

    def call(self, name: str, **arguments: Any) -> ToolOutput:
        """Invoke one of this env's tools directly (handy in tests and notebooks)."""
        return self.toolbox.invoke(ToolCall(name=name, arguments=arguments))


def tool_observation(parsed: ParseResult, outputs: Sequence[ToolOutput]) -> tuple[list[Message], str | None]:
    """The observation of a tool turn — one tool message per call's output, one per parse error — and the turn's
    error text (failed calls and parse errors joined; None if none)."""
    messages = [Message(role="tool", name=call.name, content=out.content) for call, out in zip(parsed.calls, outputs)]
    messages += [Message(role="tool", name="error", content=f"Error: {err}") for err in parsed.errors]
    errors = [out.content for out in outputs if not out.ok] + [f"Error: {err}" for err in parsed.errors]
    return messages, "; ".join(errors) or None


def _numeric(verdict: Verdict) -> dict[str, float]:
    """A verdict's numeric details (booleans left out)."""
    return {k: float(v) for k, v in verdict.details.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
