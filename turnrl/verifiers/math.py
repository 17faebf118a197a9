"""Math answer verification: extract one final answer, compare it with the reference using math-verify.

A response must commit to one answer. A response that hedges — several different boxed answers, "18 or 19",
``x = 17 \vee x = 19``, a union, a list of candidates where one value is asked for — is not correct, even if the
right value is among them: an answer that math-verify also finds equal to another number it contains is a hedge.
Answers whose evaluation could hang the verifier (power towers, huge exponents or factorials: sympy evaluates them
eagerly, holding the GIL, so no timeout can stop it) are refused unparsed as ``too_complex``. Where the reference
is a plain number, an answer that is still a calculation (``41 * 7 - 56``, ``\frac{558}{6}``; a simple fraction is
allowed for a decimal reference: ``\frac{1}{2}`` for 0.5) is ``unevaluated``.

Its namesake :mod:`turnrl.envs.builtin.math` is the same concept a layer up: the environments that pose math tasks
and grade them here.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Literal

from math_verify import parse as mv_parse
from math_verify import verify as mv_verify

from turnrl.verifiers.base import Verdict

AnswerFormat = Literal["auto", "boxed", "hash", "tag"]
ANSWER_FORMATS: tuple[str, ...] = ("auto", "boxed", "hash", "tag")
MAX_ANSWER_CHARS = 300

# math-verify logs a warning each time its (signal-based) timeout is disabled off the main thread.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_HEDGE = re.compile(r"\\text\{\s*or\s*\}|\bor\b|\beither\b|\\lor\b|\\vee\b|\\cup\b|\\pm\b|\\mp\b|\\sim\b|\\\\", re.I)
# A power whose exponent holds another power or 5+ digits, chained powers, a factorial of 4+ digits, a huge literal.
_COSTLY = re.compile(r"\^\s*\{[^{}]*(?:\^|\d{5})|\^\s*\(?[\d.]*\d{5}|\^\s*\w+\s*\^|\^\s*\{[^{}]*\{|\d{4,}\s*!|\d{400}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_boxed(text: str) -> list[str]:
    r"""Contents of every ``\boxed{…}`` / ``\fbox{…}`` in ``text`` (balanced braces), in order."""
    out: list[str] = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1].strip())
    return out


def _hash_answers(text: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"####\s*([^\n]*)", text) if m.group(1).strip()]


def _tag_answers(text: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"<answer>(.*?)</answer>", text, re.S)]


def _fallback_answers(text: str) -> list[str]:
    phrase = list(re.finditer(r"answer is[:\s]*([^\n]+?)\s*(?:\.\s|\.?$)", text, re.I | re.M))
    if phrase:
        return [phrase[-1].group(1).strip()]
    numbers = _NUMBER.findall(text)
    return [numbers[-1]] if numbers else []


_EXTRACTORS = {"boxed": extract_boxed, "hash": _hash_answers, "tag": _tag_answers}


def extract_candidates(text: str, answer_format: AnswerFormat = "auto") -> tuple[list[str], str]:
    """All final-answer candidates of the requested format, and the format they were found in.

    ``auto`` tries ``<answer>`` tags, then ``\\boxed{}``, then ``####``, then a plain "the answer is X" or the
    last number (format ``"plain"``).
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"unknown answer_format {answer_format!r}; choose one of {ANSWER_FORMATS}")
    if answer_format != "auto":
        return _EXTRACTORS[answer_format](text), answer_format
    for fmt in ("tag", "boxed", "hash"):
        found = _EXTRACTORS[fmt](text)
        if found:
            return found, fmt
    return _fallback_answers(text), "plain"


def gsm8k_reference(answer: str) -> str:
    """The final answer of a GSM8K solution: the text after the last ``####``, without thousands separators."""
    if "####" not in answer:
        return answer.strip()
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def normalize(answer: str) -> str:
    """Light clean-up before math-verify: currency signs, ``\\$``, trailing periods, ``\\!`` spacing."""
    s = answer.strip()
    s = s.replace("\\$", "").replace("$", "").replace("\\!", "").replace("\\dfrac", "\\frac")
    s = re.sub(r"^\\text\{\s*(.*?)\s*\}$", r"\1", s)
    return s.strip().rstrip(".").strip()


def _is_list(s: str) -> bool:
    """Whether an answer lists several values ("18, 19"); thousands separators do not count."""
    return "," in re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)


def _parse(s: str) -> list[object]:
    # math-verify's timeout uses signal.alarm, which only works on the main thread.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    return mv_parse(f"${s}$", parsing_timeout=timeout)


def _equivalent(a: str, b: str) -> bool:
    """Whether two normalized answers are mathematically equal (math-verify), or equal as strings."""
    if a == b:
        return True
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    pa, pb = _parse(a), _parse(b)
    if pa and pb:
        return bool(mv_verify(pa, pb, timeout_seconds=timeout))
    return a.replace(" ", "").lower() == b.replace(" ", "").lower()


def _hedge_marks(s: str) -> set[str]:
    """The alternatives an answer writes: "or", \\vee, \\cup, \\pm, a line break, a lone "|" (|x| is an absolute
    value)... A mark the reference also has (an interval union, a matrix, 1 \\pm \\sqrt{5}) is no hedge."""
    marks = {m.group(0).lower().strip() for m in _HEDGE.finditer(s)}
    return marks | ({"|"} if s.count("|") % 2 else set()) | ({"\\mid"} if "\\mid" in s else set())


def _ambiguous(pred: str, ref: str) -> bool:
    """Whether ``pred`` (which matches ``ref``) also matches another number written in it: a hedge in disguise."""
    others = [n for n in dict.fromkeys(_NUMBER.findall(pred)) if not _equivalent(n.replace(",", ""), ref)]
    return any(_matches(pred, n.replace(",", "")) for n in others[:5])


def _matches(pred: str, ref: str) -> bool:
    if _equivalent(pred, ref):
        return True
    # "50%" for a reference of 50 (GSM8K): also compare with the percent sign stripped.
    stripped = pred.replace("\\%", "").replace("%", "").strip()
    return stripped != pred and "%" not in ref and _equivalent(stripped, ref)


_PLAIN_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
_OPERATION = re.compile(r"[\d)}]\s*(?:[-+*/×÷^·:]|\\times|\\cdot|\\div)\s*[-\d({\\]|\\d?frac")


_FRACTION = re.compile(r"^-?(?:\d+\s*/\s*\d+|\\d?frac\{\d+\}\{\d+\})$")  # a decimal's exact form: 1/2 for 0.5


def _unevaluated(answer: str) -> bool:
    """Whether an answer is a calculation rather than its result (``41 * 7 - 56``, ``558 / 6``, ``\\frac{558}{6}``):
    math-verify finds it equal to its value, so a policy that restates the question's expression would be paid for
    a sum it never did (SmolLM2 learned exactly that under Pre-PPO on Arithmetic levels 3-4, 2026-11-26)."""
    return bool(_OPERATION.search(answer.replace(",", "")))


def verify(prediction: str, reference: str, *, answer_format: AnswerFormat = "auto") -> Verdict:
    """Judge a model response against a reference answer.

    Args:
        prediction: the full response text; the final answer is extracted from it.
        reference: the reference answer (a GSM8K solution with ``#### N`` is accepted as is).
        answer_format: where the answer must be — ``boxed`` (``\\boxed{}``), ``hash`` (``#### N``), ``tag``
            (``<answer>…</answer>``) or ``auto`` (any of these, else "the answer is X" / the last number).

    Returns:
        A :class:`Verdict` with ``correct``, ``score`` (1.0 or 0.0), the ``extracted`` answer and ``details``
        (``reason`` when not correct: ``no_answer``, ``hedged``, ``too_long``, ``too_complex``, ``unevaluated`` or
        ``mismatch``).
    """
    if not isinstance(prediction, str):
        raise TypeError(f"prediction must be a string, got {type(prediction).__name__}")
    ref = normalize(gsm8k_reference(reference))
    candidates, fmt = extract_candidates(prediction, answer_format)
    if not candidates:
        return Verdict(correct=False, score=0.0, extracted=None, details={"reason": "no_answer", "format": fmt})
    answers = [normalize(c) for c in candidates]
    final = answers[-1]
    if len(final) > MAX_ANSWER_CHARS:
        return Verdict(correct=False, score=0.0, extracted=final[:MAX_ANSWER_CHARS], details={"reason": "too_long"})
    distinct = list(dict.fromkeys(answers))
    if any(_COSTLY.search(a) for a in distinct):
        return Verdict(correct=False, score=0.0, extracted=final, details={"reason": "too_complex", "format": fmt})
    hedged = (
        bool(_hedge_marks(final) - _hedge_marks(ref))
        or (_is_list(final) and not _is_list(ref))
        or any(not _equivalent(a, final) for a in distinct if a != final)
    )
    if hedged:
        return Verdict(
            correct=False,
            score=0.0,
            extracted=final,
            details={"reason": "hedged", "candidates": distinct, "format": fmt},
        )
    if _PLAIN_NUMBER.match(ref) and _unevaluated(final) and not ("." in ref and _FRACTION.match(final)):
        return Verdict(correct=False, score=0.0, extracted=final, details={"reason": "unevaluated", "format": fmt})
    correct = _matches(final, ref)
    if correct and _ambiguous(final, ref):
        return Verdict(
            correct=False,
            score=0.0,
            extracted=final,
            details={"reason": "hedged", "candidates": distinct, "format": fmt},
        )
    details = {"format": fmt} if correct else {"reason": "mismatch", "format": fmt}
    return Verdict(correct=correct, score=float(correct), extracted=final, details=details)
