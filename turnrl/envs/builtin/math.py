"""Math environments: a task list graded by :func:`turnrl.verifiers.math.verify`, with an optional calculator.

``turnrl/GSM8K-v0`` and ``turnrl/MATH500-v0`` read their data as described in :mod:`turnrl.envs.data`;
``turnrl/Arithmetic-v0`` (:mod:`turnrl.envs.builtin.arithmetic`) generates its own.

Its namesake :mod:`turnrl.verifiers.math` is the same concept a layer down: the grading of a math answer, which
these environments call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from turnrl.envs.core import StepResult, Task, TaskSource
from turnrl.envs.data import DataFormatError, load_rows
from turnrl.envs.formats.swirl_format import MATH_DEMOS, MATH_INSTRUCTIONS, MATH_STOP, place_demos
from turnrl.envs.tool_env import DEFAULT_FEEDBACK, ToolEnv
from turnrl.tools.base import ToolError, ToolOutput
from turnrl.tools.calculator import calculator as calculator_tool
from turnrl.tools.calculator import evaluate as calculate
from turnrl.tools.parsers import ParseResult, TagParser
from turnrl.types import ToolCall
from turnrl.verifiers.math import AnswerFormat, gsm8k_reference, verify

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Solve the problem step by step."
INSTRUCTIONS: dict[str, str] = {
    "auto": "End with 'The answer is N.'",
    "boxed": "Put your final answer within \\boxed{}.",
    "hash": "End your reply with a line '#### ANSWER' giving the final answer.",
    "tag": "Put your final answer within <answer></answer> tags.",
}
TEMPLATES: dict[str, str] = {
    "auto": "The answer is %s.",
    "boxed": "The answer is \\boxed{%s}.",
    "hash": "The answer is below.\n#### %s",
    "tag": "<answer>%s</answer>",
}


class MathEnv(ToolEnv):
    """A math word-problem environment: one answer per task, graded by math equivalence.

    Args:
        tasks: the problems (see :class:`~turnrl.envs.tool_env.ToolEnv`).
        system_prompt: the system message; ``None`` for none.
        answer_format: where the final answer must be — ``"boxed"`` (``\\boxed{}``), ``"hash"`` (``#### N``)
            or ``"tag"`` (``<answer>…</answer>``), or ``"auto"`` (any of those, else "the answer is N" or the
            last number — lenient, for small models; hedging is still wrong). The instruction is appended. Default
            ``"boxed"``; ``"tag"`` with ``tool_style="swirl"``, which accepts no other.
        max_turns: the most assistant turns; default 1, or 4 when ``retry`` or ``calculator`` is on.
        retry: after a wrong answer, say so and let the model answer again while turns remain.
        feedback: the message after a wrong answer.
        calculator: offer the safe calculator tool.
        tool_style: ``"hermes"`` or ``"tags"`` (``<calculator>2+2</calculator>``) for the calculator, or ``"swirl"``:
            SWiRL's format (:mod:`turnrl.envs.formats.swirl_format`) — the calculator on as ``<math_exp>EXPR</math_exp>``,
            results shown as ``EXPR -> RESULT``, the answer in ``<answer>`` tags, a turn ends at a closing tag
            (``stop``), at most 10 steps by default, and few-shot ``demos``.
        demos: with ``tool_style="swirl"``: ``"default"`` (built-in demonstrations), ``"none"``, a file path or the
            demonstrations' text (``Question:`` / ``assistant:`` / ``tool:`` lines).
        demos_in: ``"turns"`` (default: the demonstrations as earlier chat turns before the question, which small
            models follow) or ``"system"`` (inside the system prompt).
        instruction: the line appended to each problem; default the answer format's (``"auto"``: "End with 'The
            answer is N.'" — which a self-verification episode's "The answer is correct" would echo; there, e.g.
            the boxed instruction with ``"auto"`` grading).
    """

    def __init__(
        self,
        tasks: TaskSource | Sequence[Task | dict[str, Any]],
        *,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        answer_format: Literal["boxed", "hash", "tag", "auto"] | None = None,
        max_turns: int | None = None,
        retry: bool = False,
        feedback: str = DEFAULT_FEEDBACK,
        calculator: bool = False,
        tool_style: Literal["hermes", "tags", "swirl"] = "hermes",
        instruction: str | None = None,
        demos: str | None = "default",
        demos_in: Literal["turns", "system"] = "turns",
        render_mode: str | None = None,
    ) -> None:
        if answer_format is not None and answer_format not in INSTRUCTIONS:
            raise ValueError(f"answer_format must be one of {sorted(INSTRUCTIONS)}, got {answer_format!r}")
        parser: Any = tool_style
        if tool_style == "swirl":
            if answer_format not in (None, "tag"):
                raise ValueError(
                    f"tool_style='swirl' answers in <answer> tags, so answer_format={answer_format!r} "
                    "cannot go with it; leave answer_format out (or pass 'tag')"
                )
            answer_format, calculator, parser = "tag", True, TagParser({"math_exp": "calculator"})
            system_prompt, self.prompt_demos = place_demos(
                system_prompt, MATH_INSTRUCTIONS, demos, MATH_DEMOS, demos_in, "calculator"
            )
            self.stop = MATH_STOP
            instruction = "" if instruction is None else instruction
            max_turns = 10 if max_turns is None else max_turns
        if max_turns is None:
            max_turns = 4 if (retry or calculator) else 1
        self.swirl = tool_style == "swirl"
        self.answer_format: AnswerFormat = answer_format or "boxed"
        super().__init__(
            tasks,
            tools=[calculator_tool] if calculator else [],
            verifier=functools.partial(verify, answer_format=self.answer_format),
            tool_style=parser,
            describe_tools=tool_style != "swirl",  # the SWiRL instructions say it all
            system_prompt=system_prompt,
            instruction=INSTRUCTIONS[self.answer_format] if instruction is None else instruction,
            max_turns=max_turns,
            retry=retry,
            feedback=feedback,
            render_mode=render_mode,
        )

    def _tool_step(self, parsed: ParseResult, outputs: Sequence[ToolOutput]) -> StepResult:
        """SWiRL's style shows each result as ``EXPR -> RESULT``."""
        if self.swirl:
            outputs = [
                ToolOutput(content=f"{call.raw or ''} -> {out.content}", ok=out.ok)
                for call, out in zip(parsed.calls, outputs)
            ]
        return super()._tool_step(parsed, outputs)

    def format_answer(self, answer: str) -> str:
        """A response stating ``answer`` in this env's answer format."""
        return TEMPLATES[self.answer_format] % answer

    def oracle_calls(self, task: Task) -> list[ToolCall]:
        """With the calculator on: compute the task's expression (Arithmetic), the last calculation of a GSM8K
        solution (``<<48/2=24>>``), or else a numeric reference answer itself."""
        if not len(self.toolbox):
            return []
        notes = re.findall(r"<<([^=>]+)=[^>]*>>", str(task.metadata.get("solution", "")))
        for expression in (task.metadata.get("expression"), *notes[-1:], task.answer.strip()):
            try:
                calculate(str(expression))
            except (ToolError, TypeError, ValueError):
                continue
            return [ToolCall(name="calculator", arguments={"expression": str(expression)})]
        return []

    def wrong_action(self) -> str:
        """A well-formed answer that is not the reference."""
        wrong = "-987654321" if self.task is None or self.task.answer.strip() != "-987654321" else "-123456789"
        return self.format_answer(wrong)


def _field(row: dict[str, Any], key: str, where: str) -> str:
    if key not in row or not isinstance(row[key], (str, int, float)):
        raise DataFormatError(f"{where}: missing or non-text field {key!r} (fields: {sorted(row)})")
    return str(row[key])


GSM8K_VALIDATION_SIZE = 500  # split "validation": the train file's last 500 problems; "train": the others


def gsm8k_tasks(split: str = "test", path: str | Path | None = None) -> list[Task]:
    """GSM8K rows ``{"question", "answer"}`` as tasks; the reference is the number after ``####``. ``split`` is
    ``"test"``, ``"train"`` (the train file without its last :data:`GSM8K_VALIDATION_SIZE` problems) or
    ``"validation"`` (those); a task's id names its file and row (``gsm8k/train/7000``)."""
    if split not in ("train", "validation", "test"):
        raise ValueError(f"split must be 'train', 'validation' or 'test', got {split!r}")
    file = "train" if split == "validation" else split
    tasks = [
        Task(
            id=f"gsm8k/{file}/{i}",
            prompt=_field(r, "question", f"gsm8k row {i}"),
            answer=gsm8k_reference(_field(r, "answer", f"gsm8k row {i}")),
            metadata={"solution": r["answer"]},
        )
        for i, r in enumerate(load_rows("gsm8k", file, path))
    ]
    if split == "validation" and path is not None:
        raise ValueError(
            "split 'validation' is the GSM8K train file's last 500 problems; with path=… the file is "
            "taken whole, so validation would be the training problems: evaluate another file by path "
            "with split 'test', or leave path out"
        )
    if file == "train" and path is None:  # a file given by path is taken whole, as the caller asked
        cut = len(tasks) - GSM8K_VALIDATION_SIZE
        tasks = tasks[cut:] if split == "validation" else tasks[:cut]
    return tasks


def math500_tasks(path: str | Path | None = None) -> list[Task]:
    """MATH-500 rows ``{"problem", "answer", "subject", "level", "unique_id"}`` as tasks."""
    rows = load_rows("math500", "test", path)
    return [
        Task(
            id=str(r.get("unique_id", f"math500/{i}")),
            prompt=_field(r, "problem", f"math500 row {i}"),
            answer=_field(r, "answer", f"math500 row {i}"),
            metadata={k: r[k] for k in ("subject", "level") if k in r},
        )
        for i, r in enumerate(rows)
    ]


def _limit(tasks: list[Task], limit: int | None) -> list[Task]:
    if limit is None:
        return tasks
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    return tasks[:limit]


class GSM8KEnv(MathEnv):
    """``turnrl/GSM8K-v0``: grade-school math word problems (Cobbe et al., 2021).

    Args:
        split: ``"test"`` (1319 problems), ``"train"`` (the train file's first 6973) or ``"validation"`` (its last
            500, for choices: a step, a rate, a recipe).
        path: a JSONL file to read instead of the resolved default (see :mod:`turnrl.envs.data`).
        limit: keep only the first ``limit`` problems.
        **options: the :class:`MathEnv` options (``answer_format``, ``max_turns``, ``retry``, ``calculator``,
            ``tool_style`` — ``"swirl"`` for SWiRL's format —, ``demos``, …).
    """

    def __init__(
        self,
        split: Literal["train", "validation", "test"] = "test",
        path: str | None = None,
        limit: int | None = None,
        **options: Any,
    ) -> None:
        super().__init__(_limit(gsm8k_tasks(split, path), limit), **options)
        self.split, self.held_out_split, self.validation_split, self.train_split = split, "test", "validation", "train"


class MATH500Env(MathEnv):
    """``turnrl/MATH500-v0``: the 500-problem MATH test subset (Lightman et al., 2023).

    Args:
        path: a JSONL file to read instead of the resolved default (see :mod:`turnrl.envs.data`).
        limit: keep only the first ``limit`` problems.
        **options: the :class:`MathEnv` options.
    """

    def __init__(self, path: str | None = None, limit: int | None = None, **options: Any) -> None:
        super().__init__(_limit(math500_tasks(path), limit), **options)
        self.split = self.held_out_split = "test"  # a test set only
