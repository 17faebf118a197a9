"""``turnrl/Arithmetic-v0``: procedurally generated arithmetic, no data needed.

Difficulty levels, so that a curriculum can start within a small model's reach:

1. one-step sums of small numbers (``What is 7 + 12?``);
2. two-digit addition and subtraction;
3. multiplication of a two-digit by a one-digit number, or exact division;
4. two-step expressions (``(23 + 18) * 4``);
5. multi-step word problems (buy, give away, save, read, plant …) with two or three operations.

Task ``i`` of a level is a pure function of ``(split, level, i)``, so indices are stable across runs and
machines. The ``train`` and ``test`` splits are disjoint: a problem belongs to the split its text hashes to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from turnrl.envs.core import Task
from turnrl.envs.math import MathEnv

LEVELS = (1, 2, 3, 4, 5)
_SPLIT_CODE = {"train": 0, "test": 1}
_NAMES = ("Ava", "Ben", "Chloe", "Dev", "Emma", "Finn", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Liam")
_ITEMS = ("apples", "stickers", "marbles", "pencils", "cookies", "stamps", "shells", "cards")

Problem = tuple[str, int, str]  # (question, answer, expression)


def _level1(rng: np.random.Generator) -> Problem:
    a, b = (int(x) for x in rng.integers(1, 21, size=2))
    return f"What is {a} + {b}?", a + b, f"{a} + {b}"


def _level2(rng: np.random.Generator) -> Problem:
    a, b = (int(x) for x in rng.integers(10, 100, size=2))
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", a + b, f"{a} + {b}"
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b, f"{a} - {b}"


def _level3(rng: np.random.Generator) -> Problem:
    a, b = int(rng.integers(10, 100)), int(rng.integers(2, 10))
    if rng.random() < 0.5:
        return f"What is {a} * {b}?", a * b, f"{a} * {b}"
    return f"What is {a * b} / {b}?", a, f"{a * b} / {b}"


def _level4(rng: np.random.Generator) -> Problem:
    a, b = (int(x) for x in rng.integers(10, 60, size=2))
    c = int(rng.integers(2, 10))
    kind = int(rng.integers(3))
    if kind == 0:
        expr, ans = f"({a} + {b}) * {c}", (a + b) * c
    elif kind == 1:
        expr, ans = f"{a} * {c} - {b}", a * c - b
    else:
        expr, ans = f"({max(a, b)} - {min(a, b)}) * {c}", (max(a, b) - min(a, b)) * c
    return f"What is {expr}?", ans, expr


def _level5(rng: np.random.Generator) -> Problem:
    name = _NAMES[int(rng.integers(len(_NAMES)))]
    item = _ITEMS[int(rng.integers(len(_ITEMS)))]
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    kind = int(rng.integers(5))
    if kind == 0:
        a, b, c = r(5, 40), r(2, 6), r(3, 12)
        d = r(1, a + b * c - 1)
        q = (f"{name} has {a} {item}. {name} buys {b} packs of {c} {item} each and then gives away {d} {item}. "
             f"How many {item} does {name} have now?")
        return q, a + b * c - d, f"{a} + {b} * {c} - {d}"
    if kind == 1:
        p, n = r(2, 15), r(2, 8)
        bill = (p * n // 10 + 1 + r(0, 5)) * 10
        q = (f"A shop sells {item} for ${p} each. {name} buys {n} of them and pays with ${bill}. "
             f"How many dollars of change does {name} get back?")
        return q, bill - p * n, f"{bill} - {p} * {n}"
    if kind == 2:
        a, d, b, e = r(5, 30), r(2, 7), r(5, 30), r(2, 7)
        q = (f"{name} reads {a} pages a day for {d} days, then {b} pages a day for {e} days. "
             f"How many pages does {name} read in total?")
        return q, a * d + b * e, f"{a} * {d} + {b} * {e}"
    if kind == 3:
        a, b = r(3, 15), r(3, 15)
        c = r(1, a * b - 1)
        q = f"A farmer plants {a} rows of {b} trees. Then {c} of the trees are cut down. How many trees are left?"
        return q, a * b - c, f"{a} * {b} - {c}"
    a, w = r(3, 25), r(3, 12)
    s = r(1, a * w - 1)
    q = f"{name} saves ${a} every week for {w} weeks and then spends ${s}. How many dollars does {name} have left?"
    return q, a * w - s, f"{a} * {w} - {s}"


GENERATORS: dict[int, Callable[[np.random.Generator], Problem]] = {
    1: _level1,
    2: _level2,
    3: _level3,
    4: _level4,
    5: _level5,
}


def split_of(question: str) -> Literal["train", "test"]:
    """The split a problem belongs to: one in ten problems (by a hash of its text) is held out for test."""
    return "test" if hashlib.sha256(question.encode()).digest()[0] % 10 == 0 else "train"


class ArithmeticTasks:
    """An indexable, reproducible source of arithmetic tasks (a :class:`~turnrl.envs.core.TaskSource`).

    Task ``i`` has level ``levels[i % len(levels)]`` and is generated from a random generator seeded with
    ``(split, level, i)``; candidates that hash to the other split are skipped.
    """

    def __init__(self, levels: Sequence[int] = (1,), split: Literal["train", "test"] = "train", size: int = 100_000):
        levels = tuple(levels)
        if not levels or any(lv not in GENERATORS for lv in levels):
            raise ValueError(f"levels must be a non-empty list drawn from {LEVELS}, got {list(levels)}")
        if split not in _SPLIT_CODE:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        self.levels, self.split, self.size = levels, split, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < self.size:
            raise IndexError(f"task index {index} out of range [0, {self.size})")
        level = self.levels[index % len(self.levels)]
        rng = np.random.default_rng([_SPLIT_CODE[self.split], level, index])
        for _ in range(10_000):  # about 1 in 10 candidates is test, 9 in 10 train: a few draws at most
            question, answer, expr = GENERATORS[level](rng)
            if split_of(question) == self.split:
                break
        else:  # pragma: no cover — would mean a generator with (almost) no problems in this split
            raise RuntimeError(f"level {level} produced no {self.split} problem in 10000 draws")
        return Task(
            id=f"arithmetic/{self.split}/L{level}/{index}",
            prompt=question,
            answer=str(answer),
            metadata={"level": level, "expression": expr},
        )


class ArithmeticEnv(MathEnv):
    """``turnrl/Arithmetic-v0``: generated arithmetic problems with known answers.

    Args:
        level: a difficulty level 1–5 or a list of them (tasks cycle through the list: a mixed curriculum).
        split: ``"train"`` or ``"test"`` (disjoint sets of problems).
        size: how many task indices exist (``reset(options={"index": i})`` with ``0 <= i < size``).
        **options: the :class:`~turnrl.envs.math.MathEnv` options (``answer_format``, ``max_turns``, ``retry``,
            ``calculator``, ``tool_style``, ``system_prompt``, ``feedback``, ``demos``); ``tool_style="swirl"`` gives
            SWiRL's format (``<math_exp>`` calls, ``EXPR -> RESULT``, ``<answer>`` tags, few-shot demos).
    """

    def __init__(
        self,
        level: int | Sequence[int] = 1,
        split: Literal["train", "test"] = "train",
        size: int = 100_000,
        **options: Any,
    ) -> None:
        levels = [level] if isinstance(level, int) else list(level)
        super().__init__(ArithmeticTasks(levels, split, size), **options)
        self.split, self.held_out_split = split, "test"
