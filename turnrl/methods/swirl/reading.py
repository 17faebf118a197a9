"""Reading SWiRL's text: one step, and what a trajectory shows of its task and its tool results — what the step
judges of its sibling :mod:`turnrl.methods.swirl.judges` look at (the data tools read steps with it too).

A step is one agent turn in the SWiRL format: a calculator call ``<math_exp>EXPR</math_exp>``, a search
``<search_query>Q</search_query>`` or a final ``<answer>…</answer>``; :func:`parse_step` reads one as the
environments do (their own tag parser), and anything else is an ``invalid`` step. What a trajectory shows:
the question as the user posed it (:func:`question_text`), the tools' results (:func:`tool_results`; an answer may
be drawn from :func:`result_texts`, search hits without their titles), the searches that found something
(:func:`searches_with_results`), the numbers in a text (:func:`numbers`) and the steps so far as text for an LLM
judge (:func:`render_context`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from turnrl.tools.parsers import TagParser
from turnrl.types import Trajectory, Turn

TOOL_TAGS = {"math_exp": "calculator", "search_query": "search"}
_PARSER = TagParser(TOOL_TAGS)  # the environments' own parser of SWiRL's tags
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")  # a number as written (thousands separators allowed)

StepKind = Literal["calculator", "search", "answer", "invalid"]


@dataclass(frozen=True)
class Step:
    """One parsed step: what kind it is and its text (the expression, query or answer; the reason when invalid)."""

    kind: StepKind
    text: str


def parse_step(text: str) -> Step:
    """Parse one SWiRL-format agent turn (a tool call first, as the environment reads it; else an answer)."""
    calls = _PARSER.parse(text).calls
    if len(calls) > 1:
        return Step("invalid", f"{len(calls)} tool calls in one step (one per step)")
    if calls:
        return Step(calls[0].name, calls[0].raw or "")  # type: ignore[arg-type]  # the tool names are step kinds
    for tag in (*TOOL_TAGS, "answer"):
        if f"<{tag}>" in text and f"</{tag}>" not in text:
            return Step("invalid", f"<{tag}> opened but never closed")
    answers = _ANSWER.findall(text)
    if answers:
        return Step("answer", answers[-1].strip())
    return Step("invalid", "neither a tool call nor an <answer>")


def numbers(text: str) -> list[float]:
    """The numbers written in ``text`` (thousands separators allowed)."""
    out = []
    for m in NUMBER.findall(text):
        try:
            out.append(float(m.replace(",", "")))
        except ValueError:
            continue
    return out


def normalize(text: str) -> str:
    """``text`` as the judges compare it: lower case, punctuation made spaces, runs of white space made one."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def question_text(traj: Trajectory) -> str:
    """The task as the user posed it: the prompt's last user message (not the system prompt nor the
    demonstrations before it, whose numbers are their own)."""
    meta = traj.metadata.get("swirl", {}).get("question") or traj.metadata.get("question")
    if isinstance(meta, str) and meta:
        return meta
    return next((m.content for m in reversed(traj.prompt) if m.role == "user"), "")


def tool_results(turns: Sequence[Turn]) -> list[str]:
    """The tool messages the environment returned after ``turns``; SWiRL shows them as ``QUERY -> RESULT``, and
    this returns the RESULT part."""
    out = []
    for turn in turns:
        for m in turn.observation:
            if m.role == "tool":
                out.append(m.content.split(" -> ", 1)[1] if " -> " in m.content else m.content)
    return out


def result_texts(turns: Sequence[Turn]) -> list[str]:
    """What an answer may be drawn from: :func:`tool_results`, with each search hit's ``TITLE: `` cut off (one
    hit per line, ``QUERY -> TITLE: TEXT``); results of other tools are kept whole."""
    out = []
    for turn in turns:
        if parse_step(turn.action.content).kind != "search":
            out += tool_results([turn])
            continue
        for m in turn.observation:
            for line in m.content.splitlines() if m.role == "tool" else ():
                hit = line.split(" -> ", 1)[1] if " -> " in line else line
                out.append(hit.split(": ", 1)[1] if ": " in hit else hit)
    return out


def found_nothing(result: str) -> bool:
    """A search result that returned nothing."""
    return not normalize(result) or normalize(result).startswith("no results")


def searches_with_results(turns: Sequence[Turn]) -> int:
    """How many of ``turns`` were searches that returned something."""
    return sum(
        parse_step(t.action.content).kind == "search"
        and (found := result_of(t)) is not None
        and not found_nothing(found)
        for t in turns
    )


def result_of(turn: Turn) -> str | None:
    """The first tool result returned after ``turn`` (the RESULT part); None when the step was not executed."""
    results = tool_results([turn])
    return results[0] if results else None


def render_context(before: Sequence[Turn]) -> str:
    """The steps so far as text for an LLM judge: each action, then each result."""
    lines = []
    for t in before:
        lines.append(t.action.content.strip())
        lines += [m.content.strip() for m in t.observation if m.role == "tool"]
    return "\n".join(lines) or "(nothing yet)"


__all__ = [
    "NUMBER",
    "TOOL_TAGS",
    "Step",
    "StepKind",
    "found_nothing",
    "normalize",
    "numbers",
    "parse_step",
    "question_text",
    "render_context",
    "result_of",
    "result_texts",
    "searches_with_results",
    "tool_results",
]
