"""Question-answering rewards: exact match and token F1 with the official SQuAD/HotPotQA normalization.

What earns credit (docs/REWARD_HACKING.md): ``correct`` is exact match of one committed answer; the reward is token
F1 (or EM) of that answer. An answer earns 0, whatever its overlap, when it

* **hedges**: several different ``<answer>`` tags, or one answer that lists candidates ("Paris or Lyon",
  "Paris; Lyon", "Paris/Lyon", "Paris, Lyon") with separators the reference does not use;
* **repeats the question** (when the verifier is given it): it holds most of the question's words;
* **pads**: at most half of its tokens are in the reference, each reference token counted as often as the reference
  holds it (a long answer farming F1 overlap, both names of a comparison question, the answer said twice) — F1's
  precision alone would still pay a share.

``details`` keeps the official ``em`` and ``f1`` of the (last) answer for reporting; ``reason`` says why the score
is 0, and ``tampering`` is 1 when one of these rules applied (a policy trying), else 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from turnrl.verifiers.base import Verdict

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
# Separators of alternatives: ; / | newline, the words "or"/"either", a comma that is not a thousands separator.
_SEPARATORS = {
    "semicolon": r";",
    "slash": r"/",
    "bar": r"\|",
    "newline": r"\n",
    "or": r"\bor\b|\beither\b",
    "comma": r"(?<!\d),|,(?!\d{3}(?!\d))",
}
MIN_PRECISION = 0.5  # share of the answer's tokens that must be in the reference for F1 credit (strictly more)
QUESTION_SHARE = 0.8  # share of the question's tokens that an answer repeating it holds


def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace (the official normalization)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, reference: str) -> float:
    """1.0 if the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def f1_score(prediction: str, reference: str) -> float:
    """Token-level F1 of the normalized strings (yes/no/noanswer must match exactly, as in HotPotQA's script)."""
    pred, ref = normalize_answer(prediction), normalize_answer(reference)
    if pred in ("yes", "no", "noanswer") or ref in ("yes", "no", "noanswer"):
        if pred != ref:
            return 0.0
    p, r = pred.split(), ref.split()
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


def extract_answer(text: str) -> str | None:
    """The last ``<answer>…</answer>`` in ``text``, or None."""
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def candidates(answer: str, reference: str) -> list[str]:
    """The alternatives ``answer`` lists, split at separators that ``reference`` does not use (one if it commits)."""
    seps = [rx for rx in _SEPARATORS.values() if not re.search(rx, reference, re.I)]
    if not seps:
        return [answer]
    parts = [p for p in re.split("|".join(f"(?:{rx})" for rx in seps), answer, flags=re.I) if normalize_answer(p)]
    return parts or [answer]


def _gamed(answers: list[str], reference: str, question: str | None) -> str | None:
    """Why the answer earns nothing though it overlaps the reference (``hedged``, ``repeats_question``, ``padded``)."""
    answer = answers[-1]
    tokens, ref = normalize_answer(answer).split(), normalize_answer(reference).split()
    q = set(normalize_answer(question).split()) if question else set()
    if len(q) >= 3 and len(q & set(tokens)) >= QUESTION_SHARE * len(q):
        return "repeats_question"
    if len({normalize_answer(a) for a in answers}) > 1 or len(candidates(answer, reference)) > 1:
        return "hedged"
    if tokens and sum((Counter(tokens) & Counter(ref)).values()) <= MIN_PRECISION * len(tokens):
        return "padded"  # a reference word counts as often as the reference has it: repeating the answer pads
    return None


def verify(prediction: str, reference: str, *, reward: str = "f1", question: str | None = None) -> Verdict:
    """Grade a response whose final answer is in ``<answer>`` tags (see the module docstring for what earns credit).

    Args:
        reward: the score — ``"f1"`` (token F1) or ``"em"`` (exact match). ``correct`` is always exact match.
        question: the question asked, to refuse answers that repeat it (optional).

    Returns:
        A Verdict with ``details`` holding the official ``em`` and ``f1`` (both 0 when no answer tag was found),
        ``tampering`` (1 if a hedge, a repeated question or padding was refused) and ``reason`` when the score is 0.
    """
    if reward not in ("f1", "em"):
        raise ValueError(f"reward must be 'f1' or 'em', got {reward!r}")
    answers = [a.strip() for a in _ANSWER_TAG.findall(prediction)]
    if not answers:
        return Verdict(
            correct=False,
            score=0.0,
            extracted=None,
            details={"reason": "no_answer", "em": 0.0, "f1": 0.0, "tampering": 0},
        )
    answer = answers[-1]
    em, f1 = exact_match(answer, reference), f1_score(answer, reference)
    gamed = (
        None
        if em == 1.0 and len({normalize_answer(a) for a in answers}) == 1
        else (_gamed(answers, reference, question) if f1 > 0 else None)
    )
    details = {"em": em, "f1": f1, "tampering": int(gamed is not None)}
    if gamed:
        return Verdict(correct=False, score=0.0, extracted=answer, details={**details, "reason": gamed})
    return Verdict(correct=em == 1.0, score=f1 if reward == "f1" else em, extracted=answer, details=details)
