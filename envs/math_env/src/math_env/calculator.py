"""A safe calculator: arithmetic expressions evaluated from their syntax tree.

Nothing is ever passed to ``eval``: the expression is parsed with :mod:`ast` and only
a whitelist of nodes is evaluated (numbers, ``+ - * / // % **``, unary signs,
parentheses, the constants ``pi`` and ``e``, and the functions ``abs``, ``round``,
``min``, ``max``, ``sqrt``, ``floor``, ``ceil``). Sizes are bounded so that no input
can exhaust memory or time: at most :data:`MAX_LENGTH` characters, exponents of at
most :data:`MAX_EXPONENT`, integers of at most :data:`MAX_INT_BITS` bits.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["CalculatorError", "MAX_EXPONENT", "MAX_INT_BITS", "MAX_LENGTH", "evaluate"]

MAX_LENGTH = 200
MAX_EXPONENT = 100
MAX_INT_BITS = 1024

Number = int | float


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed."""


def _pow(a: Number, b: Number) -> Number:
    if abs(b) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {b} is too large (at most {MAX_EXPONENT})")
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a.bit_length() * b > MAX_INT_BITS:
        raise CalculatorError("result is too large")
    return a**b


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _round(x: Number, ndigits: int | None = None) -> Number:
    if ndigits is not None and (not isinstance(ndigits, int) or abs(ndigits) > 15):
        raise CalculatorError("round(x, n) needs an integer n between -15 and 15")
    return round(x, ndigits)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def _check(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculatorError(f"not a number: {value!r}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError("result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is not finite")
    return value


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        return _check(node.value)
    if isinstance(node, ast.BinOp):
        op = _BINARY.get(type(node.op))
        if op is None:
            hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed{hint}")
        return _check(op(_eval(node.left), _eval(node.right)))
    if isinstance(node, ast.UnaryOp):
        uop = _UNARY.get(type(node.op))
        if uop is None:
            raise CalculatorError(f"operator {type(node.op).__name__} is not allowed")
        return _check(uop(_eval(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise CalculatorError(
                f"unknown function {ast.unparse(node.func)!r}; known: {', '.join(sorted(_FUNCTIONS))}"
            )
        if node.keywords:
            raise CalculatorError("keyword arguments are not allowed")
        args = [_eval(a) for a in node.args]
        return _check(_FUNCTIONS[node.func.id](*args))
    raise CalculatorError(f"{type(node).__name__} is not allowed in an expression")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression (``CalculatorError`` when it is not allowed,
    malformed or not computable, e.g. a division by zero)."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"malformed expression: {e.msg}") from None
    try:
        return _eval(tree)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except (OverflowError, ValueError, TypeError) as e:
        if isinstance(e, CalculatorError):
            raise
        raise CalculatorError(str(e)) from None
