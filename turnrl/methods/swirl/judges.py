"""SWiRL's step judges (docs/algorithms.md §1, §10): is one step GOOD or BAD, judged from the context alone.

No judge sees the gold answer. A step is one agent turn in the SWiRL format: a calculator call
``<math_exp>EXPR</math_exp>``, a search ``<search_query>Q</search_query>`` or a final ``<answer>…</answer>``; its
sibling :mod:`turnrl.methods.swirl.reading` reads a step and what a trajectory shows (the question, the tools'
results), and this module holds the judges that label steps from that.

* :class:`RuleStepJudge` — rule-based process scores where the tool allows them:

  - calculator: the expression evaluates, is not a repeat of an earlier one, computes something (a bare number is
    BAD) that is not already known (a result equal to an earlier tool result is BAD: ``<math_exp>2</math_exp>``
    after ``48 - 46 -> 2`` was the first thing SWiRL training learned to farm), and every number in it comes from
    the question or an earlier tool result (made-up operands are BAD); in a whole trajectory its result must also
    be used later (in a later expression or the answer);
  - search: a non-empty query that is not a repeat, whose result (when the step was executed) is neither empty
    nor one already seen; with ``max_searches`` N, a search after N earlier ones is BAD (new searches are otherwise
    always GOOD, and a policy paid per step learns to search instead of answering: SWiRL on HotPotQA searched five
    times and never answered by step 10; a two-hop question needs two paragraphs);
  - answer: it must follow from the tools' results — a number equal to a tool result, or a short text (at most
    :attr:`RuleStepJudge.max_answer_words` words) found, as whole words, in the *text* of a retrieved result (a
    search result's title does not count: "answer with the title of what the search returned" is not an answer).
    BAD are: a copied passage (it is "found" in the result, and scores F1 ≈ 0: what SmolLM2 with demonstrations
    writes on HotPotQA); a word found only inside another ("no" in "known"); an answer of stop words only; an
    answer whose words all come from the question, unless the question offers a choice ("A or B?"); "yes"/"no"
    unless the question asks yes or no and at least two searches returned something (a comparison needs both
    sides; SWiRL on HotPotQA first learned to answer "No" to everything, docs/REWARD_HACKING.md). On HotPotQA's dev
    file, given its supporting paragraphs, 491 of the 500 gold answers are GOOD. A bare answer with no tool result
    behind it is BAD: that is what makes the rule reward *tool use*, and also its blind spot (a correct
    mental-arithmetic answer is BAD; docs/REWARD_HACKING.md);
  - anything else (no tag, an unclosed tag, two calls in one step) is BAD.

* :class:`LLMStepJudge` — the process judge of :mod:`turnrl.verifiers.judge` with any agent; an unparseable or
  failed judgement gives ``good=None``, which never counts as GOOD.

Both label either every step of a whole trajectory (:meth:`label_trajectory`, for filtering stored data) or the
*last* turn of step rows (:meth:`label_rows`, for rewarding freshly sampled steps: context = the prompt and the
earlier turns; the step's own tool result is read from the turn's observation when it was executed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from turnrl.agents.spec import AgentSpec, ConfigStr, keyword_typo
from turnrl.methods.swirl.reading import (
    NUMBER,
    found_nothing,
    normalize,
    numbers,
    parse_step,
    question_text,
    render_context,
    result_of,
    result_texts,
    searches_with_results,
    tool_results,
)
from turnrl.plugins import Registry
from turnrl.types import Trajectory, Turn

# Words that carry no answer: an answer made only of these is BAD wherever it is "found".
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "by",
        "with",
        "from",
        "and",
        "or",
        "but",
        "not",
        "no",
        "yes",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "which",
        "what",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "as",
        "he",
        "she",
        "they",
        "his",
        "her",
        "their",
    ]
)
# A question that starts with one of these asks yes or no.
_YES_NO_OPENERS = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "do",
        "does",
        "did",
        "can",
        "could",
        "has",
        "have",
        "had",
        "will",
        "would",
        "should",
        "may",
        "might",
    ]
)


@dataclass(frozen=True)
class StepLabel:
    """A judgement of one step: ``good`` True/False, or None when the judge's reply was unparseable or failed."""

    good: bool | None
    reason: str = ""

    @property
    def score(self) -> float:
        """1.0 for GOOD, else 0.0 (BAD and unparseable alike)."""
        return 1.0 if self.good else 0.0


def _has(values: Sequence[float], x: float) -> bool:
    return any(abs(v - x) <= 1e-6 * max(1.0, abs(x)) for v in values)


class StepJudge(Protocol):
    """Labels SWiRL steps GOOD/BAD without the gold answer."""

    def label_trajectory(self, traj: Trajectory) -> list[StepLabel]:
        """One label per turn of a whole trajectory (may look at later steps)."""
        ...

    def label_rows(self, rows: Sequence[Trajectory]) -> list[StepLabel]:
        """A label for the last turn of each row (its context: the prompt and the earlier turns)."""
        ...


class RuleStepJudge:
    """Rule-based process scores for calculator, search and answer steps (see the module docstring).

    Args:
        max_answer_words: the longest text answer that can be GOOD (HotPotQA's answers are short spans: 99 % of its
            dev answers have at most 8 words).
        max_searches: how many searches of an episode can be GOOD (None: no limit).
    """

    def __init__(self, max_answer_words: int = 8, max_searches: int | None = None) -> None:
        if max_answer_words < 1 or (max_searches is not None and max_searches < 1):
            raise ValueError(
                f"need max_answer_words >= 1 and max_searches >= 1 (or None), got {max_answer_words}, {max_searches}"
            )
        self.max_answer_words = int(max_answer_words)
        self.max_searches = max_searches

    def label_trajectory(self, traj: Trajectory) -> list[StepLabel]:
        """Every step of ``traj``; a calculator result must also be used by a later step."""
        q = question_text(traj)
        return [self.label_step(q, traj.turns[:i], turn, traj.turns[i + 1 :]) for i, turn in enumerate(traj.turns)]

    def label_rows(self, rows: Sequence[Trajectory]) -> list[StepLabel]:
        """The last turn of each row, from its own context (no later steps to look at)."""
        return [
            self.label_step(question_text(r), r.turns[:-1], r.turns[-1], None)
            if r.turns
            else StepLabel(False, "no step")
            for r in rows
        ]

    def label_step(self, question: str, before: Sequence[Turn], turn: Turn, later: Sequence[Turn] | None) -> StepLabel:
        """One step given the question, the turns before it and (for whole trajectories) the turns after it."""
        step = parse_step(turn.action.content)
        if step.kind == "invalid":
            return StepLabel(False, step.text)
        results = tool_results(before)
        if step.kind == "calculator":
            return self._calculator(step.text, question, before, results, turn, later)
        if step.kind == "search":
            return self._search(step.text, before, results, turn)
        return self._answer(step.text, question, before)

    def _calculator(
        self,
        expr: str,
        question: str,
        before: Sequence[Turn],
        results: list[str],
        turn: Turn,
        later: Sequence[Turn] | None,
    ) -> StepLabel:
        from turnrl.tools.calculator import CalculatorError, evaluate

        try:
            value = evaluate(expr)
        except (CalculatorError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
            return StepLabel(False, f"the expression does not evaluate: {e}")
        earlier = {
            normalize(parse_step(t.action.content).text)
            for t in before
            if parse_step(t.action.content).kind == "calculator"
        }
        if normalize(expr) in earlier:
            return StepLabel(False, "repeats an earlier calculation")
        try:
            result = float(value)
        except (TypeError, ValueError):
            result = None
        own = numbers(expr)
        if result is not None and len(own) == 1 and _has(own, result):  # "<math_exp>2</math_exp>": nothing computed
            return StepLabel(False, "computes nothing (a bare number)")
        if result is not None and _has([x for r in results for x in numbers(r)], result):
            return StepLabel(False, "its result is already known from an earlier step")
        known = numbers(question) + [x for r in results for x in numbers(r)]
        made_up = [x for x in numbers(expr) if not _has(known, x) and not _has(known, -x)]
        if made_up:
            return StepLabel(
                False,
                f"uses numbers found neither in the question nor in earlier results: "
                f"{', '.join(f'{x:g}' for x in made_up[:3])}",
            )
        if later is not None:
            used = [x for t in later for x in numbers(parse_step(t.action.content).text)]
            if result is None or not _has(used, result):
                return StepLabel(False, "its result is never used by a later step")
        return StepLabel(True, "a grounded calculation" + ("" if later is None else " whose result is used"))

    def _search(self, query: str, before: Sequence[Turn], results: list[str], turn: Turn) -> StepLabel:
        if not normalize(query):
            return StepLabel(False, "an empty search query")
        earlier = {
            normalize(parse_step(t.action.content).text)
            for t in before
            if parse_step(t.action.content).kind == "search"
        }
        if normalize(query) in earlier:
            return StepLabel(False, "repeats an earlier search")
        done = sum(parse_step(t.action.content).kind == "search" for t in before)
        if self.max_searches is not None and done >= self.max_searches:
            return StepLabel(False, f"a search after {done} (at most {self.max_searches} can be GOOD): answer")
        found = result_of(turn)
        if found is not None:
            if found_nothing(found):
                return StepLabel(False, "the search returned nothing")
            if normalize(found) in {normalize(r) for r in results}:
                return StepLabel(False, "the search returned nothing new")
        return StepLabel(True, "a new search" + ("" if found is None else " with new results"))

    def _answer(self, answer: str, question: str, before: Sequence[Turn]) -> StepLabel:
        if not normalize(answer):
            return StepLabel(False, "an empty answer")
        results = result_texts(before)
        if not results:
            return StepLabel(False, "no tool result to follow from")
        values = numbers(answer)
        if values and len(values) == 1 and normalize(answer) == normalize(NUMBER.findall(answer)[0]):
            computed = [x for r in results for x in numbers(r)]
            ok = _has(computed, values[0])
            return StepLabel(ok, "equals a tool result" if ok else "equals no tool result")
        norm = normalize(answer)
        words = norm.split()
        if len(words) > self.max_answer_words:
            return StepLabel(False, f"not a short answer ({len(words)} words; at most {self.max_answer_words})")
        q_words = normalize(question).split()
        if norm in ("yes", "no"):
            if not q_words or q_words[0] not in _YES_NO_OPENERS:
                return StepLabel(False, "yes/no to a question that does not ask yes or no")
            if searches_with_results(before) < 2:
                return StepLabel(False, "yes/no after fewer than two searches with results")
            return StepLabel(True, "yes/no to a yes/no question after two searches")
        content = [w for w in words if w not in STOP_WORDS]
        if not content:
            return StepLabel(False, "only stop words")
        if set(content) <= set(q_words) and "or" not in q_words:
            return StepLabel(False, "every word of it is in the question")
        ok = any(f" {norm} " in f" {normalize(r)} " for r in results)
        return StepLabel(ok, "found in a retrieved text" if ok else "found in no retrieved text")


class LLMStepJudge:
    """SWiRL's generative process judge (:class:`turnrl.verifiers.judge.ProcessJudge`) with any agent."""

    def __init__(self, agent: Any, **judge_kwargs: Any) -> None:
        from turnrl.verifiers.judge import ProcessJudge

        self.judge = ProcessJudge(agent, **judge_kwargs)

    def _items(self, question: str, before: Sequence[Turn], turn: Turn) -> dict[str, str]:
        return {"question": question, "context": render_context(before), "step": turn.action.content.strip()}

    def _labels(self, items: list[dict[str, str]]) -> list[StepLabel]:
        out = []
        for j in self.judge.judge_many(items):
            if j.error:
                out.append(StepLabel(None, j.error))
            elif j.label is None:
                out.append(StepLabel(None, "unparseable judgement: " + j.raw.strip()[-120:]))
            else:
                out.append(StepLabel(j.label == "GOOD", j.raw.strip()[-200:]))
        return out

    def label_trajectory(self, traj: Trajectory) -> list[StepLabel]:
        """Every step, each judged from its own context (one batched call)."""
        q = question_text(traj)
        return self._labels([self._items(q, traj.turns[:i], t) for i, t in enumerate(traj.turns)])

    def label_rows(self, rows: Sequence[Trajectory]) -> list[StepLabel]:
        """The last turn of each row (one batched call)."""
        return self._labels([self._items(question_text(r), r.turns[:-1], r.turns[-1]) for r in rows])


def _check_judge(name: str, obj: Any) -> None:
    """A step judge plug-in is a class or function that builds a judge from its options."""
    if not callable(obj):
        raise ValueError(
            f"step judge {name!r} must be a class or a function that returns a judge (with "
            f"label_trajectory and label_rows), got {type(obj).__name__}"
        )


#: the process judges by name (:func:`make_step_judge`): ``rule`` is built in; an installed package adds its own
#: under the ``turnrl.judges`` entry-point group (``name = "module:Class"``, called with the judge's options), a
#: module of yours with ``STEP_JUDGES.register(name, Class)``. A spec that no judge is registered under is an agent
#: spec: an :class:`LLMStepJudge` asks that model.
STEP_JUDGES: Registry[Callable[..., StepJudge]] = Registry(
    "step judge",
    "turnrl.judges",
    {"rule": "turnrl.methods.swirl.judges:RuleStepJudge"},
    check=_check_judge,
    hint="or give an agent spec (tiny:chatml, hf:PATH, openai:URL#MODEL, a built-in model name) for a model judge",
)


class StepJudgeSpec(ConfigStr):
    """A step judge as written (a ``str``: it compares, prints and saves as the user wrote it): a registered judge's
    name (:data:`STEP_JUDGES`), or else an agent spec (:class:`~turnrl.agents.spec.AgentSpec`, judged by that model).
    The config's ``algorithm.judge`` and ``turnrl swirl filter --judge`` read it once, at load.

    Raises (at load, as a config error):
        ValueError: neither a registered judge's name nor a well-formed agent spec (the message names both forms).
    """

    __slots__ = ()

    def __new__(cls, spec: str) -> StepJudgeSpec:
        text = str(spec).strip()
        if text not in STEP_JUDGES:
            if typo := keyword_typo(text, STEP_JUDGES.names(), "step judge"):
                raise typo
            try:
                AgentSpec(text)
            except ValueError as e:
                raise ValueError(f"{STEP_JUDGES.unknown(text)} (as an agent spec: {e})") from None
        return super().__new__(cls, text)

    @property
    def is_registered(self) -> bool:
        """A registered judge's name (else an agent spec: a model judges)."""
        return self in STEP_JUDGES

    @property
    def agent(self) -> AgentSpec | None:
        """The agent spec of a model judge (its ``kind``, ``target``); None for a registered judge."""
        return None if self.is_registered else AgentSpec(self)


def make_step_judge(spec: str | StepJudge, **kwargs: Any) -> StepJudge:
    """A registered judge's name (``"rule"`` → :class:`RuleStepJudge`, or a plug-in's; ``kwargs``: its options) →
    that judge; any agent spec (``tiny:chatml``, ``hf:PATH``, ``openai:URL#MODEL``, ``smollm2-135m-instruct`` …) →
    an :class:`LLMStepJudge` with that agent; a judge object is returned as is.

    Raises:
        ValueError: a spec that is neither a registered judge nor an agent spec (the message lists both forms).
    """
    if not isinstance(spec, str):
        return spec
    if spec in STEP_JUDGES:
        return STEP_JUDGES.get(spec)(**kwargs)
    from turnrl.agents import make_agent

    try:
        agent = make_agent(spec)
    except (ValueError, OSError) as e:  # OSError: a model that is no built-in, no path and no hub id
        raise ValueError(f"{STEP_JUDGES.unknown(spec)} (as an agent spec: {e})") from e
    return LLMStepJudge(agent, **kwargs)


__all__ = [
    "STEP_JUDGES",
    "STOP_WORDS",
    "LLMStepJudge",
    "RuleStepJudge",
    "StepJudge",
    "StepLabel",
    "make_step_judge",
]
