"""``turnrl/Arithmetic-v0``: procedurally generated arithmetic, no data needed.

Difficulty levels, so that a curriculum can start within a small model's reach:

1. one-step sums of small numbers (``What is 7 + 12?``);
2. two-digit addition and subtraction;
3. multiplication of a two-digit by a one-digit number, or exact division;
4. two-step expressions (``(23 + 18) * 4``);
5. multi-step word problems (buy, give away, save, read, plant …) with two or three operations.

**The same problem.** Two tasks are the same problem when their arithmetic is the same once the operands of ``+``
and ``*`` are ordered and the story is stripped (:func:`turnrl.envs.splits.canonical_expression` of the task's
expression): ``7 + 12`` is ``12 + 7``; "Ava saves $3 a week for 5 weeks and spends $4" is "a farmer plants 3 rows
of 5 trees and 4 are cut down" (both ``3 * 5 - 4``). ``Task.metadata["canonical"]`` holds that form.

**Splits.** A problem belongs to ``train``, ``validation`` or ``test`` by a hash of its canonical form
(:func:`turnrl.envs.splits.split_of_key`), so every presentation of it — either order of a sum, any story — lands on
the same side, at every level that can generate it. Sums of two numbers from 1 to 20 (all of level 1, and the
overlap of level 2) have 210 problems: 52 % of the hash range is test (102 problems), 15 % validation (42) and the rest
train (66), so that level 1 has a held-out set of distinct problems large enough for at most ±5 points of standard
error. Every other
problem: 10 % test, 5 % validation, 85 % train.

* ``train``: task ``i`` is drawn from a generator seeded with ``(level, i)``, drawing again until the problem is a
  training one; problems repeat across indices (as a training stream does).
* ``validation`` and ``test``: **distinct** problems, in the order a seeded stream first meets them — each problem
  once, so a figure over ``n`` of them counts ``n`` items. Level 1's test split holds all its 102 problems; the other
  levels hold up to :data:`HELD_OUT_SIZE` (136 for level 3, whose test problems are fewer). Validation is for
  choices (a step, a rate, a recipe); test is read once, for the figure.

Task ``i`` of a split is the same on every machine.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from turnrl.envs.builtin.math import MathEnv
from turnrl.envs.core import Task
from turnrl.envs.splits import canonical_expression, split_of_key
from turnrl.utils import Shared

LEVELS = (1, 2, 3, 4, 5)
SPLITS = ("train", "validation", "test")
_SPLIT_CODE = {"train": 0, "validation": 2, "test": 1}
#: Shares of the hash range: sums of two numbers from 1 to 20 (level 1's problems, wherever generated), every other.
SMALL_SUM_SHARES = {"test": 0.52, "validation": 0.15}
SHARES = {"test": 0.1, "validation": 0.05}
#: The most distinct problems a held-out split holds per level (level 1 holds all of its own).
HELD_OUT_SIZE = {"test": 500, "validation": 200}
_SMALL_SUM = re.compile(r"^\((\d+)\+(\d+)\)$")
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
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))
    kind = int(rng.integers(5))
    if kind == 0:
        a, b, c = r(5, 40), r(2, 6), r(3, 12)
        d = r(1, a + b * c - 1)
        q = (
            f"{name} has {a} {item}. {name} buys {b} packs of {c} {item} each and then gives away {d} {item}. "
            f"How many {item} does {name} have now?"
        )
        return q, a + b * c - d, f"{a} + {b} * {c} - {d}"
    if kind == 1:
        p, n = r(2, 15), r(2, 8)
        bill = (p * n // 10 + 1 + r(0, 5)) * 10
        q = (
            f"A shop sells {item} for ${p} each. {name} buys {n} of them and pays with ${bill}. "
            f"How many dollars of change does {name} get back?"
        )
        return q, bill - p * n, f"{bill} - {p} * {n}"
    if kind == 2:
        a, d, b, e = r(5, 30), r(2, 7), r(5, 30), r(2, 7)
        q = (
            f"{name} reads {a} pages a day for {d} days, then {b} pages a day for {e} days. "
            f"How many pages does {name} read in total?"
        )
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


@functools.lru_cache(maxsize=1 << 16)  # problems repeat (level 1 has 210): a split's tasks are read by the thousand
def canonical(expression: str) -> str:
    """The canonical form of a generated problem (its ``Task.metadata["canonical"]``): ``arithmetic:`` and the
    canonical expression (see the module docstring)."""
    return "arithmetic:" + canonical_expression(expression)


@functools.lru_cache(maxsize=1 << 16)
def split_of(expression: str) -> Literal["train", "validation", "test"]:
    """The split a problem belongs to, by a hash of its canonical form; sums of two numbers from 1 to 20 with
    :data:`SMALL_SUM_SHARES`, every other problem with :data:`SHARES` (see the module docstring)."""
    key = canonical(expression)
    small = _SMALL_SUM.match(key.removeprefix("arithmetic:"))
    shares = SMALL_SUM_SHARES if small and all(1 <= int(x) <= 20 for x in small.groups()) else SHARES
    return split_of_key(key, shares)  # type: ignore[return-value]  # the shares' keys are these splits


@functools.cache
def held_out_problems(level: int, split: str) -> tuple[Problem, ...]:
    """The distinct problems of ``level`` in a held-out split, in the order a stream seeded with ``(split, level)``
    first meets them: up to :data:`HELD_OUT_SIZE`, or every one the stream finds before 20,000 draws in a row bring
    nothing new (level 1: all of them)."""
    rng = np.random.default_rng([_SPLIT_CODE[split], level, 10**6])
    seen: dict[str, Problem] = {}
    idle = 0
    while len(seen) < HELD_OUT_SIZE[split] and idle < 20_000:
        question, answer, expr = GENERATORS[level](rng)
        key = canonical(expr)
        if key not in seen and split_of(expr) == split:
            seen[key] = (question, answer, expr)
            idle = 0
        else:
            idle += 1
    return tuple(seen.values())


@functools.lru_cache(maxsize=1 << 16)  # a run's held-out check reads the first 20,000 training tasks (split_check.py)
def _train_problem(level: int, index: int) -> Problem:
    """Training task ``index`` of ``level``: drawn from a generator seeded with ``(level, index)`` until the problem
    is a training one."""
    rng = np.random.default_rng([_SPLIT_CODE["train"], level, index])
    for _ in range(10_000):  # 85-50 % of candidates are train: a few draws at most
        problem = GENERATORS[level](rng)
        if split_of(problem[2]) == "train":
            return problem
    # (would mean a generator with (almost) no training problems)
    raise RuntimeError(f"level {level} produced no train problem in 10000 draws")  # pragma: no cover


class ArithmeticTasks(Shared):
    """An indexable, reproducible source of arithmetic tasks (a :class:`~turnrl.envs.core.TaskSource`).

    Task ``i`` has level ``levels[i % len(levels)]``. In ``train`` it is drawn from a generator seeded with
    ``(level, i)`` (drawing again until the problem is a training one); in ``validation`` and ``test`` it is the
    next distinct problem of that level's split (:func:`held_out_problems`, less the problems an
    earlier level of the list poses: sums of 10–20 are problems of levels 1 and 2), and the split holds as many tasks
    as every level can fill.
    """

    def __init__(
        self, levels: Sequence[int] = (1,), split: Literal["train", "validation", "test"] = "train", size: int = 100_000
    ):
        levels = tuple(levels)
        if not levels or any(lv not in GENERATORS for lv in levels):
            raise ValueError(f"levels must be a non-empty list drawn from {LEVELS}, got {list(levels)}")
        if split not in _SPLIT_CODE:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        self.levels, self.split = levels, split
        self._held: dict[int, list[Problem]] = {}
        if split != "train":  # each level's distinct problems, less those an earlier level of the list poses
            seen: set[str] = set()
            for lv in dict.fromkeys(levels):
                self._held[lv] = [p for p in held_out_problems(lv, split) if canonical(p[2]) not in seen]
                seen.update(canonical(p[2]) for p in self._held[lv])
            size = min(size, len(levels) * min(len(self._held[lv]) // levels.count(lv) for lv in levels))
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < self.size:
            raise IndexError(f"task index {index} out of range [0, {self.size})")
        level = self.levels[index % len(self.levels)]
        if self.split != "train":
            slot = index % len(self.levels)  # a level listed twice takes every other of its problems
            k = index // len(self.levels) * self.levels.count(level) + self.levels[:slot].count(level)
            question, answer, expr = self._held[level][k]
        else:
            question, answer, expr = _train_problem(level, index)
        return Task(
            id=f"arithmetic/{self.split}/L{level}/{index}",
            prompt=question,
            answer=str(answer),
            metadata={"level": level, "expression": expr, "canonical": canonical(expr)},
        )


class ArithmeticEnv(MathEnv):
    """``turnrl/Arithmetic-v0``: generated arithmetic problems with known answers.

    Args:
        level: a difficulty level 1–5 or a list of them (tasks cycle through the list: a mixed curriculum).
        split: ``"train"``, ``"validation"`` or ``"test"`` (disjoint sets of problems; see the module docstring).
        size: at most how many task indices exist (``reset(options={"index": i})`` with ``0 <= i < size``).
        **options: the :class:`~turnrl.envs.builtin.math.MathEnv` options (``answer_format``, ``max_turns``, ``retry``,
            ``calculator``, ``tool_style``, ``system_prompt``, ``feedback``, ``demos``); ``tool_style="swirl"`` gives
            SWiRL's format (``<math_exp>`` calls, ``EXPR -> RESULT``, ``<answer>`` tags, few-shot demos).
    """

    def __init__(
        self,
        level: int | Sequence[int] = 1,
        split: Literal["train", "validation", "test"] = "train",
        size: int = 100_000,
        **options: Any,
    ) -> None:
        levels = [level] if isinstance(level, int) else list(level)
        super().__init__(ArithmeticTasks(levels, split, size), **options)
        self.split, self.held_out_split, self.validation_split, self.train_split = split, "test", "validation", "train"
