"""The calculator the example agents give their model (openai_agent.py, agents_sdk_agent.py, anthropic_agent.py):
arithmetic only — numbers, + - * / and parentheses, no names, no calls — or an error message the model can read.
Plain Python, no client library: each agent describes the tool to its API in that API's own form.
"""

from __future__ import annotations

import ast
import operator

from turnrl.utils import parse_python

DESCRIPTION = "Evaluate an arithmetic expression with + - * / and parentheses."
# The server describes the tool (its template, or turnrl's gateway for templates that cannot render tools).
HINT = "Use the calculator tool for arithmetic. When you know the answer, reply with it."

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculator(expression: str) -> str:
    """The value of ``expression`` (an integer where it is one), or ``error: …``."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("only numbers and + - * / ( ) are allowed")

    try:
        # turnrl runs several episodes of a program at once, in threads, and Python 3.11's ast.parse is not safe in
        # several threads at once (cpython#106905): parse_python takes the lock every parse in turnrl takes
        tree = parse_python(str(expression), mode="eval")
        value = ev(tree.body)
        return str(int(value)) if float(value).is_integer() else f"{value:.6g}"
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError, OverflowError) as e:
        return f"error: {e}"
