"""What "the same problem" means, and splits that keep equivalent problems on one side.

A held-out split is only held out when no problem of it has an equivalent in training. "12 + 7" and "7 + 12" are the
same problem; so are "Ava saves $3 a week for 5 weeks…" and "A farmer plants 3 rows of 5 trees…" once the story is
stripped and only the arithmetic is left. Each environment says what its problems' *canonical form* is
(``Task.metadata["canonical"]``); a generated environment assigns a problem to a split by a hash of that form, never
of its text, so every presentation of one problem lands on the same side.

* :func:`canonical_expression` — an arithmetic expression with the operands of ``+`` and ``*`` ordered, ``a - b + c``
  and ``a + c - b`` made one, numbers normalized (``12.0`` is ``12``).
* :func:`normalize_text` — question text compared as a reader would: case, spacing and end punctuation ignored
  (the dataset environments, whose problems are their text).
* :func:`canonical_key` — a task's canonical form: its ``metadata["canonical"]`` where the environment gives one,
  else its normalized prompt.
* :func:`split_of_key` — train, validation or test, by a hash of the canonical form and the split's shares.
"""

from __future__ import annotations

import ast
import hashlib
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from turnrl.utils import parse_python

SPLITS = ("train", "validation", "test")


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _terms(node: ast.AST, sign: int) -> list[tuple[int, str]]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right = sign if isinstance(node.op, ast.Add) else -sign
        return _terms(node.left, sign) + _terms(node.right, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _terms(node.operand, -sign)
    return [(sign, _canon(node))]


def _factors(node: ast.AST) -> list[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [_canon(node)]


def _canon(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return _number(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return _canon(node.operand)
    if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
    ):
        terms = _terms(node, 1)
        plus = sorted(t for s, t in terms if s > 0)
        minus = sorted(t for s, t in terms if s < 0)
        return "(" + "+".join(plus) + "".join(f"-{t}" for t in minus) + ")"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return "(" + "*".join(sorted(_factors(node))) + ")"
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)):
        op = {ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}[type(node.op)]
        return f"({_canon(node.left)}{op}{_canon(node.right)})"
    raise ValueError(f"not an arithmetic expression: {ast.unparse(node)!r}")


def canonical_expression(expression: str) -> str:
    """The canonical form of an arithmetic expression: equal for ``12 + 7`` and ``7 + 12``, for ``(3 + 4) * 5`` and
    ``5 * (4 + 3)``, for ``a - b + c`` and ``c + a - b``; different for ``12 - 7`` and ``7 - 12``. Subtraction,
    division and powers keep their order; numbers are normalized (``12.0`` → ``12``); ``×`` and ``÷`` are read as
    ``*`` and ``/``.

    Raises:
        ValueError: the text is not an expression of numbers and ``+ - * / // % **``.
    """
    text = expression.replace("×", "*").replace("÷", "/").replace("−", "-").strip()
    try:
        tree = parse_python(text, mode="eval")  # one parse at a time (CPython 3.11, cpython#106905)
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from e
    return _canon(tree.body)


_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Question text as a reader compares it: Unicode-normalized (NFKC), lower case, runs of whitespace as one
    space, and no whitespace or ``.?!`` at either end."""
    text = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold())
    return text.strip(" .?!")


def canonical_key(task: Any) -> str:
    """A task's canonical form: ``task.metadata["canonical"]`` when the environment gives one (generated problems:
    what makes two of them the same), else ``"text:"`` and its normalized prompt (:func:`normalize_text`), followed by
    ``" => "`` and its normalized reference answer where it has one: one question with two different answers poses
    two problems (a game whose prompt is always "play" and whose secret differs)."""
    canonical = (getattr(task, "metadata", None) or {}).get("canonical")
    if canonical is not None:
        return str(canonical)
    answer = normalize_text(str(getattr(task, "answer", "") or ""))
    return "text:" + normalize_text(str(task.prompt)) + (f" => {answer}" if answer else "")


def unit_hash(key: str) -> float:
    """A number in [0, 1) fixed by ``key`` (the first 8 bytes of its SHA-256), the same on every machine."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


def split_of_key(key: str, shares: Mapping[str, float]) -> str:
    """The split a canonical form belongs to: ``test`` for the first ``shares["test"]`` of the hash range, then
    ``validation`` for the next ``shares["validation"]``, ``train`` for the rest."""
    test, validation = float(shares.get("test", 0.0)), float(shares.get("validation", 0.0))
    if not (test >= 0.0 and validation >= 0.0 and test + validation < 1.0):
        raise ValueError(f"shares of test and validation must be >= 0 and leave some for train, got {dict(shares)}")
    u = unit_hash(key)
    return "test" if u < test else "validation" if u < test + validation else "train"
