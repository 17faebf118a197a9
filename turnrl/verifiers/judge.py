"""LLM judges as verifiers: process (SWiRL, GOOD/BAD), outcome (YES/NO), pairwise (A/B), and a hybrid reward.

Any agent can judge: one with a ``chat(messages, params)`` method (the OpenAI-compatible backend) is asked
directly; any other (HF, vLLM, scripted) gets the conversation rendered through its tokenizer's chat template.
Prompts are templates with named fields. Parsing is strict: the judgement's last line must be exactly one label
(``GOOD``, ``**GOOD**``, ``Answer: GOOD`` …); anything else is *unparseable*, reported as such and never read as a
positive label. Judgements are batched (one ``generate`` call for all uncached items) and cached by a hash of the
prompt and sampling parameters. A failing or timed-out judge yields judgements with ``error`` set, not exceptions.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from turnrl.verifiers.base import Verdict

PROCESS_TEMPLATE = (
    "You are judging one step of an agent that answers a question by searching and reasoning.\n\n"
    "Question: {question}\n\nContext so far:\n{context}\n\nLast step:\n{step}\n\n"
    "Judge only the last step. An answer must follow from the retrieved results; a search query must be likely to "
    "help. Explain briefly, then end with a line that is exactly GOOD or BAD."
)
OUTCOME_TEMPLATE = (
    "Question: {question}\nThe answer key says: {gold}\nMy answer is: {prediction}\n\n"
    "Am I correct? Explain briefly, then end with a line that is exactly YES or NO."
)
PAIRWISE_TEMPLATE = (
    "Question: {question}\n\nResponse A:\n{a}\n\nResponse B:\n{b}\n\n"
    "Which response is better? Explain briefly, then end with a line that is exactly A or B."
)


@dataclass(frozen=True)
class Judgement:
    """One judgement: the parsed ``label`` (None when unparseable or failed), the raw text, and any error."""

    label: str | None
    raw: str = ""
    error: str | None = None

    @property
    def parsed(self) -> bool:
        """Whether a label was read."""
        return self.label is not None


def chat_texts(agent: Any, conversations: Sequence[list[dict[str, str]]], params: Any) -> list[str]:
    """One reply per conversation from any agent (``chat`` if it has one, else chat template + ``generate``)."""
    if hasattr(agent, "chat"):
        return [agent.chat(conv, params)[0] for conv in conversations]
    tok = agent.tokenizer
    prompts = [
        tok.encode(tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True), add_special_tokens=False)
        for conv in conversations
    ]
    return [c.text for c in agent.generate(prompts, params)]


def parse_label(text: str, labels: Sequence[str]) -> str | None:
    """The label on the last non-empty line, if that line is exactly one label (with optional "Answer:"/markdown)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    alternation = "|".join(re.escape(label) for label in labels)
    m = re.fullmatch(
        rf"\W*(?:(?:final\s+)?(?:answer|verdict|judgement|judgment)\s*[:\-]\s*)?\W*({alternation})\W*",
        lines[-1].strip(),
        flags=re.I,
    )
    if not m:
        return None
    word = m.group(1)
    return next(label for label in labels if label == word) if word in labels else None


class Judge:
    """A generative judge with a prompt template and two or more labels.

    Args:
        agent: any turnrl agent (or anything with ``chat``/``generate``).
        template: the user message, with ``{field}`` placeholders.
        labels: the allowed final answers; the first is the positive one.
        params: sampling parameters (default greedy, 256 new tokens).
        system_prompt: an optional system message.
    """

    template = PROCESS_TEMPLATE
    labels: tuple[str, ...] = ("GOOD", "BAD")

    def __init__(
        self,
        agent: Any,
        *,
        template: str | None = None,
        labels: Sequence[str] | None = None,
        params: Any = None,
        system_prompt: str | None = None,
    ) -> None:
        if params is None:
            from turnrl.types import SamplingParams

            params = SamplingParams(temperature=0.0, max_new_tokens=256)
        self.agent, self.params, self.system_prompt = agent, params, system_prompt
        self.template = template or self.template
        self.labels = tuple(labels or self.labels)
        self.cache: dict[str, Judgement] = {}
        self.calls = 0

    def conversation(self, fields: dict[str, Any]) -> list[dict[str, str]]:
        """The chat messages for one item."""
        try:
            user = self.template.format(**fields)
        except KeyError as e:
            raise ValueError(f"the judge template needs the field {e.args[0]!r}; got {sorted(fields)}") from None
        return ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
            {"role": "user", "content": user}
        ]

    def _key(self, conv: list[dict[str, str]]) -> str:
        params = self.params.model_dump() if hasattr(self.params, "model_dump") else repr(self.params)
        return hashlib.sha256(json.dumps([conv, params], sort_keys=True, default=str).encode()).hexdigest()

    def judge_many(self, items: Sequence[dict[str, Any]]) -> list[Judgement]:
        """Judge many items (dicts of template fields) in one batch; cached items are not asked again."""
        convs = [self.conversation(item) for item in items]
        keys = [self._key(c) for c in convs]
        todo = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if todo:
            first = dict(zip(keys, convs))
            try:
                self.calls += 1
                texts = chat_texts(self.agent, [first[k] for k in todo], self.params)
                for k, text in zip(todo, texts):
                    self.cache[k] = Judgement(parse_label(text, self.labels), raw=text)
            except Exception as e:  # a failing judge is reported, not raised (and not cached)
                failed = Judgement(None, error=f"judge failed: {type(e).__name__}: {str(e)[:300]}")
                return [self.cache.get(k, failed) for k in keys]
        return [self.cache[k] for k in keys]

    def judge(self, **fields: Any) -> Judgement:
        """Judge one item."""
        return self.judge_many([fields])[0]

    def verdict(self, judgement: Judgement) -> Verdict:
        """A Verdict: correct (score 1) for the positive label; unparseable or failed judgements score 0."""
        positive = judgement.label == self.labels[0]
        details = {"label": judgement.label, "unparseable": judgement.label is None and judgement.error is None}
        if judgement.error:
            details["error"] = judgement.error
        return Verdict(correct=positive, score=float(positive), extracted=judgement.label, details=details)


class ProcessJudge(Judge):
    """SWiRL's process judge: is the last step GOOD or BAD given the question and the context, without the answer.

    Fields: ``question``, ``context``, ``step``.
    """

    template = PROCESS_TEMPLATE
    labels = ("GOOD", "BAD")


class OutcomeJudge(Judge):
    """Outcome judge: does the prediction match the gold answer? YES or NO. Fields: ``question``, ``gold``, ``prediction``."""

    template = OUTCOME_TEMPLATE
    labels = ("YES", "NO")

    def __call__(self, prediction: str, reference: str, *, question: str = "") -> Verdict:
        """Use as a verifier: ``(prediction, reference) -> Verdict``."""
        return self.verdict(self.judge(question=question, gold=reference, prediction=prediction))


class PairwiseJudge(Judge):
    """Pairwise generative judge (Pairwise-RL): which of two responses is better, asked in both orders.

    ``compare`` returns the preference for ``a`` in [0, 1] averaged over the orders that parsed (None if neither
    did), which removes position bias: a judge that always says "A" gives 0.5. Fields: ``question``, ``a``, ``b``.
    """

    template = PAIRWISE_TEMPLATE
    labels = ("A", "B")

    def compare_many(self, items: Sequence[tuple[str, str, str]]) -> list[float | None]:
        """Preferences for the first response of each ``(question, a, b)``."""
        asks = [{"question": q, "a": a, "b": b} for q, a, b in items] + [
            {"question": q, "a": b, "b": a} for q, a, b in items
        ]
        js = self.judge_many(asks)
        n = len(items)
        out: list[float | None] = []
        for fwd, rev in zip(js[:n], js[n:]):
            votes = ([1.0 if fwd.label == "A" else 0.0] if fwd.parsed else []) + (
                [1.0 if rev.label == "B" else 0.0] if rev.parsed else []
            )
            out.append(sum(votes) / len(votes) if votes else None)
        return out

    def compare(self, question: str, a: str, b: str) -> float | None:
        """Preference for ``a`` over ``b``."""
        return self.compare_many([(question, a, b)])[0]


class HybridReward:
    """RTV + GenRM (arXiv 2503.22230): a rule verifier where it applies, the outcome judge elsewhere.

    Args:
        judge: the outcome judge for references the rule cannot check.
        rule: a rule verifier ``(prediction, reference) -> Verdict`` (default: math equivalence).
        applies: whether the rule applies to a reference (default: math-verify can parse it as a number or
            expression and it has no letters beyond LaTeX commands).
    """

    def __init__(
        self,
        judge: OutcomeJudge,
        rule: Callable[[str, str], Verdict] | None = None,
        applies: Callable[[str], bool] | None = None,
    ) -> None:
        if rule is None:
            from turnrl.verifiers.math import verify

            rule = verify
        self.judge, self.rule = judge, rule
        self.applies = applies or rule_applies

    def __call__(self, prediction: str, reference: str, *, question: str = "") -> Verdict:
        """Grade with the rule if it applies to ``reference``, else with the judge; ``details["source"]`` says which."""
        if self.applies(reference):
            v = self.rule(prediction, reference)
            return v.model_copy(update={"details": {**v.details, "source": "rule"}})
        v = self.judge(prediction, reference, question=question)
        return v.model_copy(update={"details": {**v.details, "source": "judge"}})


def rule_applies(reference: str) -> bool:
    """Whether a rule (math equivalence) can check answers against ``reference``: it holds a digit and no word of
    two or more letters outside LaTeX commands (``42``, ``\\frac{1}{2}``, ``x = 3``; not ``Paris`` or ``1984 film``)."""
    text = re.sub(r"\\[a-zA-Z]+", "", reference)
    return bool(re.search(r"\d", text)) and not re.search(r"[A-Za-z]{2,}", text)
