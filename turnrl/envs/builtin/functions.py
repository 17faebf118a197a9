"""``turnrl/Functions-v0``: write a short Python function from its docstring; hidden tests run in the sandbox.

Generated, so it needs no data: each task is one of a few dozen *families* (``add``: "Return x plus {k}.",
``above``: "Return the elements of xs that are greater than {k}, in order.", ``tail``: "Return the last {k}
characters of s." …) with its constant(s) filled in. The reference solution is one line; its tests are four asserts
on inputs drawn for the task (ints, lists of ints, lowercase words) with the reference's results. The prompt shows
the signature and the docstring, so an answer may be the whole function or only its body (:class:`CodeEnv`
continues the signature). It is a code task SmolLM2-135M solves sometimes (the easy families) and rarely (the
rest) — room to learn, and the line-level process rewards of :mod:`turnrl.methods.prm` need both outcomes.

The same problem is the same function: one family with the same constants (``Task.metadata["canonical"]`` is
``functions:FAMILY:CONSTANTS``); the test inputs drawn for it do not make another problem. The ``train``,
``validation`` and ``test`` splits are disjoint: a function belongs to the split its prompt hashes to (one in four is
test), and a further hash takes one in seven of the others for validation. Task ``i`` of a split is the same on every
machine.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from turnrl.envs.builtin.code import CodeEnv
from turnrl.envs.core import Task
from turnrl.utils import Shared

WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "ocean", "maple", "candle", "rocket", "garden")
LETTERS = "aeilnorst"
SUFFIXES = ("!", "?", "ing", "ed", "-x", "_1", " end", "s")


@dataclass(frozen=True)
class Family:
    """One kind of function: ``doc`` and ``body`` are templates over the constants ``param`` draws."""

    name: str
    arg: Literal["x", "n", "xs", "s"]
    doc: str
    body: str
    params: tuple[dict[str, Any], ...]


def _k(lo: int, hi: int) -> tuple[dict[str, Any], ...]:
    return tuple({"k": k} for k in range(lo, hi + 1))


_LETTER = tuple({"c": c} for c in LETTERS)
_SUFFIX = tuple({"w": w} for w in SUFFIXES)


FAMILIES: tuple[Family, ...] = (
    Family("add", "x", "Return x plus {k}.", "x + {k}", _k(2, 30)),
    Family("subtract", "x", "Return x minus {k}.", "x - {k}", _k(2, 30)),
    Family("times", "x", "Return x multiplied by {k}.", "x * {k}", _k(2, 12)),
    Family("square_plus", "x", "Return the square of x plus {k}.", "x * x + {k}", _k(1, 20)),
    Family("distance", "x", "Return the absolute difference between x and {k}.", "abs(x - {k})", _k(1, 30)),
    Family("at_most", "x", "Return the smaller of x and {k}.", "min(x, {k})", _k(-10, 20)),
    Family("divisible", "n", "Return True if n is divisible by {k}, otherwise False.", "n % {k} == 0", _k(2, 9)),
    Family(
        "scale",
        "xs",
        "Return a new list with every element of xs multiplied by {k}.",
        "[v * {k} for v in xs]",
        _k(2, 12),
    ),
    Family(
        "shift", "xs", "Return a new list with {k} added to every element of xs.", "[v + {k} for v in xs]", _k(1, 30)
    ),
    Family(
        "above",
        "xs",
        "Return the elements of xs that are greater than {k}, in order.",
        "[v for v in xs if v > {k}]",
        _k(-5, 15),
    ),
    Family(
        "count_above",
        "xs",
        "Return how many elements of xs are greater than {k}.",
        "sum(1 for v in xs if v > {k})",
        _k(-5, 15),
    ),
    Family("total_plus", "xs", "Return the sum of the elements of xs plus {k}.", "sum(xs) + {k}", _k(1, 30)),
    Family("largest_minus", "xs", "Return the largest element of xs minus {k}.", "max(xs) - {k}", _k(1, 30)),
    Family("repeat", "s", "Return the string s repeated {k} times.", "s * {k}", _k(2, 5)),
    Family("count_letter", "s", "Return how many times the letter '{c}' occurs in s.", "s.count('{c}')", _LETTER),
    Family("tail", "s", "Return the last {k} characters of s.", "s[-{k}:]", _k(1, 5)),
    Family("head", "s", "Return the first {k} characters of s.", "s[:{k}]", _k(1, 5)),
    Family("with_suffix", "s", "Return s followed by the text '{w}'.", "s + '{w}'", _SUFFIX),
    Family("length_plus", "s", "Return the length of s plus {k}.", "len(s) + {k}", _k(1, 30)),
)
_SPLIT_CODE = {"train": 0, "validation": 2, "test": 1}


def split_of(prompt: str) -> Literal["train", "validation", "test"]:
    """The split a task belongs to: one in four (by a hash of its prompt) is held out for test; of the others, one
    in seven (by another hash) is validation."""
    if hashlib.sha256(prompt.encode()).digest()[0] % 4 == 0:
        return "test"
    return "validation" if hashlib.sha256(b"validation:" + prompt.encode()).digest()[0] % 7 == 0 else "train"


def _inputs(arg: str, rng: np.random.Generator) -> list[Any]:
    """Four test inputs for an argument kind (the first an edge case)."""
    if arg in ("x", "n"):
        return [0] + [int(v) for v in rng.integers(-20, 40, size=3)]
    if arg == "xs":
        return [[int(rng.integers(-5, 20))]] + [
            [int(v) for v in rng.integers(-5, 20, size=int(rng.integers(3, 7)))] for _ in range(3)
        ]
    return [str(WORDS[int(i)]) for i in rng.choice(len(WORDS), size=4, replace=False)]


def make_task(family: Family, params: dict[str, Any], inputs: list[Any], task_id: str) -> Task:
    """The task of ``family`` with ``params``: prompt (signature and docstring), tests and reference solution."""
    doc, body = family.doc.format(**params), family.body.format(**params)
    head = f'def {family.name}({family.arg}):\n    """{doc}"""\n'
    solution = f"{head}    return {body}\n"
    reference: dict[str, Any] = {}
    exec(solution, reference)  # our own template, not model output
    fn = reference[family.name]
    tests = [f"assert {family.name}({v!r}) == {fn(v)!r}" for v in inputs]
    return Task(
        id=task_id,
        prompt=_prompt(family, params),
        answer="",
        metadata={
            "tests": tests,
            "entry_point": family.name,
            "prompt_code": head,
            "solution": solution,
            "family": family.name,
            "canonical": canonical(family, params),
        },
    )


@functools.cache
def distinct(split: Literal["train", "validation", "test"]) -> tuple[tuple[Family, dict[str, Any]], ...]:
    """The split's distinct functions (family, constants), the families taking turns (so that the first tasks of a
    split cover every family)."""
    own = [[p for p in f.params if split_of(_prompt(f, p)) == split] for f in FAMILIES]
    out = []
    for r in range(max(map(len, own))):
        out += [(f, ps[r]) for f, ps in zip(FAMILIES, own) if r < len(ps)]
    return tuple(out)


def canonical(family: Family, params: dict[str, Any]) -> str:
    """The canonical form of a function task: its family and constants (the inputs its tests draw do not count)."""
    return f"functions:{family.name}:" + ",".join(f"{k}={params[k]!r}" for k in sorted(params))


def _prompt(family: Family, params: dict[str, Any]) -> str:
    head = f'def {family.name}({family.arg}):\n    """{family.doc.format(**params)}"""\n'
    return f"Complete this Python function:\n```python\n{head}```"


class FunctionTasks(Shared):
    """The tasks of one split: task ``i`` is distinct function ``i mod n`` with test inputs drawn for ``i``."""

    def __init__(self, split: Literal["train", "validation", "test"] = "train", size: int | None = None) -> None:
        if split not in _SPLIT_CODE:
            raise ValueError(f"split must be 'train', 'validation' or 'test', got {split!r}")
        self.split = split
        self.functions = distinct(split)
        self.size = len(self.functions) if size is None else size
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Task:
        if not 0 <= index < self.size:
            raise IndexError(f"task index {index} out of range [0, {self.size})")
        family, params = self.functions[index % len(self.functions)]
        rng = np.random.default_rng([_SPLIT_CODE[self.split], index, 0xF7])
        return make_task(family, params, _inputs(family.arg, rng), f"functions/{self.split}/{index}/{family.name}")


class FunctionsEnv(CodeEnv):
    """``turnrl/Functions-v0``: write the function its docstring describes (see the module docstring).

    Args:
        split: ``"train"``, ``"validation"`` or ``"test"`` (disjoint).
        size: how many task indices exist (default: the split's distinct functions, about 240 train, 35 validation
            and 90 test);
            beyond them the functions repeat with new test inputs.
        **options: the :class:`CodeEnv` options (``sandbox``, ``timeout``, ``max_turns``, ``partial_credit`` …).
    """

    def __init__(
        self, split: Literal["train", "validation", "test"] = "train", size: int | None = None, **options: Any
    ) -> None:
        super().__init__(FunctionTasks(split, size), **options)  # type: ignore[arg-type]  # a lazy sequence of tasks
        self.split, self.held_out_split, self.validation_split, self.train_split = split, "test", "validation", "train"
