"""A safe calculator: arithmetic on a parsed syntax tree, never ``eval``.

Allowed: numbers, ``+ - * / // % **`` (``^`` is read as a power), parentheses, unary signs, the constants
``pi`` and ``e``, and the functions ``sqrt, abs, round, floor, ceil, exp, log, log10, log2, sin, cos, tan,
factorial, min, max, gcd, lcm``. Thousands separators (``1,000``), ``×``, ``÷`` and a leading ``=`` are accepted.

Everything that could take long or eat memory is refused quickly with a message: long expressions, deep
nesting, powers or factorials whose result would be huge, and integers past a size limit.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

from turnrl.tools.base import ToolError, tool
from turnrl.utils import parse_python

MAX_CHARS = 500
MAX_DEPTH = 30
MAX_INT_BITS = 4096  # ≈ 1233 decimal digits
MAX_FACTORIAL = 450  # 450! has ≈ 1000 digits


class CalculatorError(ToolError):
    """The expression is invalid or refused; the message says why."""


def _check_int(x: int | float) -> int | float:
    if isinstance(x, int) and x.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"result too large (more than {MAX_INT_BITS} bits)")
    if isinstance(x, float) and not math.isfinite(x):
        raise CalculatorError("result is not a finite number")
    return x


def _pow(a: int | float, b: int | float) -> int | float:
    if isinstance(b, int) and isinstance(a, int) and b >= 0 and abs(a) > 1:
        if b * math.log2(abs(a)) > MAX_INT_BITS:
            raise CalculatorError(f"power too large: {a}**{b} would have more than {MAX_INT_BITS} bits")
    try:
        r = a**b
    except OverflowError as e:
        raise CalculatorError("power overflows") from e
    if isinstance(r, complex):
        raise CalculatorError("result is a complex number")
    return r


def _div(a: int | float, b: int | float) -> int | float:
    if b == 0:
        raise CalculatorError("division by zero")
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


def _floordiv(a: int | float, b: int | float) -> int | float:
    if b == 0:
        raise CalculatorError("division by zero")
    return a // b


def _mod(a: int | float, b: int | float) -> int | float:
    if b == 0:
        raise CalculatorError("modulo by zero")
    return a % b


def _factorial(n: int | float) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0:
        raise CalculatorError("factorial needs a non-negative integer")
    if n > MAX_FACTORIAL:
        raise CalculatorError(f"factorial too large: {n}! (limit {MAX_FACTORIAL}!)")
    return math.factorial(n)


def _real(fn: Callable[..., float]) -> Callable[..., float]:
    def wrapped(*args: float) -> float:
        try:
            return fn(*args)
        except (ValueError, OverflowError) as e:
            raise CalculatorError(f"{fn.__name__}: {e}") from e

    wrapped.__name__ = fn.__name__
    return wrapped


_BINOPS: dict[type, Callable[[int | float, int | float], int | float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
}
_FUNCS: dict[str, Callable[..., int | float]] = {
    "sqrt": _real(math.sqrt),
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": _real(math.exp),
    "log": _real(math.log),
    "ln": _real(math.log),
    "log10": _real(math.log10),
    "log2": _real(math.log2),
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "factorial": _factorial,
    "min": min,
    "max": max,
    "gcd": math.gcd,
    "lcm": math.lcm,
}
_CONSTS = {"pi": math.pi, "e": math.e}


def _prepare(expression: str) -> str:
    if not isinstance(expression, str):
        raise CalculatorError("the expression must be text")
    expr = expression.strip().lstrip("=").strip().rstrip("=").strip()
    if not expr:
        raise CalculatorError("empty expression")
    if len(expr) > MAX_CHARS:
        raise CalculatorError(f"expression too long ({len(expr)} characters, limit {MAX_CHARS})")
    depth = max_depth = 0
    for ch in expr:
        depth += ch in "([{"
        depth -= ch in ")]}"
        max_depth = max(max_depth, depth)
    if max_depth > MAX_DEPTH:
        raise CalculatorError(f"expression nested too deeply ({max_depth} levels, limit {MAX_DEPTH})")
    expr = expr.replace("×", "*").replace("÷", "/").replace("−", "-").replace("^", "**")
    expr = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", expr)  # 1,000,000 -> 1000000
    expr = re.sub(r"(\d+(?:\.\d+)?)!", r"factorial(\1)", expr)  # 5! -> factorial(5)
    return expr


def _eval(node: ast.AST, depth: int = 0) -> int | float:
    if depth > 3 * MAX_DEPTH:
        raise CalculatorError("expression nested too deeply")
    if isinstance(node, ast.Expression):
        return _eval(node.body, depth + 1)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _check_int(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        return _check_int(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _eval(node.operand, depth + 1)
        return v if isinstance(node.op, ast.UAdd) else -v
    if isinstance(node, ast.Name):
        if node.id in _CONSTS:
            return _CONSTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = _FUNCS.get(node.func.id)
        if fn is None:
            raise CalculatorError(f"unknown function {node.func.id!r}; allowed: {', '.join(sorted(_FUNCS))}")
        args = [_eval(a, depth + 1) for a in node.args]
        try:
            return _check_int(fn(*args))
        except TypeError as e:
            raise CalculatorError(f"bad arguments to {node.func.id}: {e}") from e
    raise CalculatorError(f"unsupported syntax: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression safely.

    Raises:
        CalculatorError: the expression is invalid, unsupported or refused (too long, too deep, too large).
    """
    expr = _prepare(expression)
    try:
        tree = parse_python(expr, mode="eval")  # one parse at a time (CPython 3.11, cpython#106905)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise CalculatorError(f"cannot parse {expression.strip()!r}") from e
    try:
        return _eval(tree)
    except (OverflowError, ValueError, ZeroDivisionError) as e:
        raise CalculatorError(f"cannot evaluate: {e}") from e


def format_number(x: int | float) -> str:
    """Integers as integers; floats rounded to 12 significant digits, integral floats without ``.0``."""
    if isinstance(x, bool):
        x = int(x)
    if isinstance(x, float):
        if x.is_integer() and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.12g}"
    return str(x)


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. (3 + 4) * 12 / 7 or sqrt(2) ** 2.

    Args:
        expression: the arithmetic expression to evaluate.
    """
    return format_number(evaluate(expression))
