"""Question-answering rewards: exact match and token F1 with the official SQuAD/HotPotQA normalization."""

from __future__ import annotations

import re
import string
from collections import Counter

from turnrl.verifiers.base import Verdict

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


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


def verify(prediction: str, reference: str, *, reward: str = "f1") -> Verdict:
    """Grade a response whose final answer is in ``<answer>`` tags.

    Args:
        reward: the score — ``"f1"`` (token F1) or ``"em"`` (exact match). ``correct`` is always exact match.

    Returns:
        A Verdict with ``details`` holding ``em`` and ``f1`` (both 0 when no answer tag was found).
    """
    if reward not in ("f1", "em"):
        raise ValueError(f"reward must be 'f1' or 'em', got {reward!r}")
    answer = extract_answer(prediction)
    if answer is None:
        return Verdict(correct=False, score=0.0, extracted=None, details={"reason": "no_answer", "em": 0.0, "f1": 0.0})
    em, f1 = exact_match(answer, reference), f1_score(answer, reference)
    return Verdict(correct=em == 1.0, score=f1 if reward == "f1" else em, extracted=answer, details={"em": em, "f1": f1})
