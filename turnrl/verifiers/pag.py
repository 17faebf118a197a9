"""PAG self-verification: verdict parsing and per-turn rewards (docs/algorithms.md §7, arXiv 2506.10406)."""

from __future__ import annotations

import re
from typing import Literal

VERDICT_CORRECT = "The answer is correct"
VERDICT_WRONG = "The answer is wrong"

_ANY_VERDICT = re.compile(r"The answer is (correct|wrong)")
# End-anchored: only whitespace, closing punctuation or markdown emphasis may follow the verdict.
_END_VERDICT = re.compile(r"The answer is (correct|wrong)[\s.!*_\"'`)\]]*\Z")


def parse_verdict(text: str) -> Literal["correct", "wrong"] | None:
    """The verifier turn's verdict, or None when it is unparseable.

    docs/algorithms.md §7: the end-anchored pattern must match exactly once — the text must contain exactly one
    "The answer is correct"/"The answer is wrong" and it must be at the end. Anything else (no verdict, two
    verdicts, a verdict followed by more text) is unparseable, and earns the verifier reward 0.
    """
    if not isinstance(text, str) or len(_ANY_VERDICT.findall(text)) != 1:
        return None
    m = _END_VERDICT.search(text)
    return m.group(1) if m else None  # type: ignore[return-value]  # the pattern's group: correct or wrong


def verdict_reward(verdict: Literal["correct", "wrong"] | None, answer_correct: bool) -> float:
    """R_v (docs/algorithms.md §7): 1 if the verdict matches the truth of the previous attempt, else 0 (also if
    unparseable)."""
    if verdict is None:
        return 0.0
    return 1.0 if (verdict == "correct") == bool(answer_correct) else 0.0


def revision_reward(first_correct: bool, revised_correct: bool, alpha: float = 1.0) -> float:
    """Reward of the revised attempt (docs/algorithms.md §7): acc₂ + α·(acc₂ − acc₁).

    With α = 1: wrong→right 2, right→wrong −1, right→right 1, wrong→wrong 0.
    """
    acc1, acc2 = float(bool(first_correct)), float(bool(revised_correct))
    return acc2 + alpha * (acc2 - acc1)
