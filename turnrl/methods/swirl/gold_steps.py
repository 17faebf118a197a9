"""A teacher that reads each arithmetic problem's expression: multi-step calculator data without a large model (ours).

docs/algorithms.md §1 generates its data with a large teacher. Offline, SmolLM2-135M answers a multi-step word
problem of ``turnrl/Arithmetic-v0`` (level 5) right almost never, so there is little for SWiRL's filters to keep.
Every generated arithmetic problem carries its expression (``Task.metadata["expression"]``, e.g. ``60 - 4 * 8``),
and that gives a calculator path, one operation a turn, in the order the expression is evaluated:

1. ``<math_exp>4 * 8</math_exp>`` (the environment answers ``4 * 8 -> 32``);
2. ``<math_exp>60 - 32</math_exp>`` (each later step uses the earlier steps' values);
3. ``<answer>28</answer>``: the gold answer.

Each step is played in the live environment, so the tool results are the calculator's. Like the gold search path
of :mod:`turnrl.methods.swirl.gold`, it reads the gold answer and the expression: use it on training problems only
(``turnrl swirl generate --agent gold`` refuses any other split).

:class:`GoldStepsAgent` is a scripted agent (token-exact through a real tokenizer, log-probabilities 0): it finds
the problem in the prompt it is given, so it serves any number of episodes in a batch.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence
from typing import Any

from turnrl.agents.scripted import ScriptedAgent
from turnrl.utils import parse_python

_OPS: dict[type, tuple[str, Callable[[int, int], int]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.floordiv),  # exact only (checked): a generated division always is
}


def calculator_steps(expression: str) -> list[tuple[str, int]]:
    """The binary operations of an integer ``expression`` in evaluation order, each written with its operands'
    values, and its value: ``"60 - 4 * 8"`` → ``[("4 * 8", 32), ("60 - 32", 28)]``; a bare number has none.

    Raises:
        ValueError: the expression holds anything but integers, ``+ - * /`` and parentheses, or a division that is
            not exact.
    """
    steps: list[tuple[str, int]] = []

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            symbol, apply = _OPS[type(node.op)]
            if symbol == "/" and (right == 0 or left % right):
                raise ValueError(f"{expression!r}: {left} / {right} is not an exact division")
            steps.append((f"{left} {symbol} {right}", apply(left, right)))
            return steps[-1][1]
        raise ValueError(f"{expression!r} is not an integer expression of + - * / and parentheses")

    try:
        tree = parse_python(expression, mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"{expression!r} is not an integer expression of + - * / and parentheses") from e
    value(tree)
    return steps


class GoldStepsAgent(ScriptedAgent):
    """Writes each problem's calculator path, one operation a turn, then its answer (see the module docstring).

    Args:
        tokenizer: the student's tokenizer (the trajectories are stored in its tokens).
        tasks: the environment's tasks (``prompt``, ``answer`` and ``metadata["expression"]``); only the problems
            it will be asked are needed (``turnrl swirl generate`` passes the first ``--tasks``).

    Raises:
        ValueError: no task has an expression (not a generated arithmetic environment), or one's expression cannot
            be stepped (:func:`calculator_steps`).
    """

    def __init__(self, tokenizer: Any, tasks: Sequence[Any]) -> None:
        self.steps = {
            str(t.prompt): (calculator_steps(t.metadata["expression"]), str(t.answer))
            for t in tasks
            if t.metadata.get("expression")
        }
        if not self.steps:
            raise ValueError(
                f"none of the {len(tasks)} tasks has metadata['expression']: the calculator teacher needs "
                "generated arithmetic problems (turnrl/Arithmetic-v0)"
            )
        super().__init__(tokenizer, self.step)

    def step(self, prompt: str) -> str:
        """The next step for the conversation ``prompt`` (the decoded token prompt): the first operation not yet
        asked of the calculator after the problem, or the answer.

        Raises:
            ValueError: no known problem appears in the prompt.
        """
        found = [(at, q) for q in self.steps if (at := prompt.rfind(q)) >= 0]
        if not found:
            raise ValueError(
                f"the calculator teacher found none of its {len(self.steps)} problems in the prompt "
                f"(…{prompt[-200:]!r}); give it the environment's tasks"
            )
        start, problem = max(found, key=lambda f: (f[0], len(f[1])))  # the last problem posed (after any demos)
        steps, answer = self.steps[problem]
        asked = prompt[start:].count("<math_exp>")
        return f"<math_exp>{steps[asked][0]}</math_exp>" if asked < len(steps) else f"<answer>{answer}</answer>"
