"""The `{expression}` language of `params:` and of repeat blocks' loop variables: integer
constants and names with + - * // % (unary + and - too) and parentheses, nothing else.

`parse_expression(text)` is the one gate: it refuses texts longer than MAX_CHARS characters or
of more than MAX_TERMS terms (names, constants and operations) before anything evaluates them,
so that no expression can exhaust the stack (a 2,000-term product would) or take long, and
names a forbidden construct by its symbol (`**`, `/ (use //)`, `a call`) or source text, never
by Python's AST. Callers turn `ExpressionError` into a one-line error naming the expression.
"""

from __future__ import annotations

import ast
import operator

__all__ = ["ExpressionError", "parse_expression", "OPS", "GRAMMAR", "MAX_CHARS", "MAX_TERMS"]

MAX_CHARS = 1000
"""The longest expression text (between the braces)."""
MAX_TERMS = 200
"""The most names, constants and operations an expression may have."""
OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
GRAMMAR = f"+, -, *, //, % and parentheses (at most {MAX_TERMS} terms and {MAX_CHARS} characters)"
"""What an expression may hold, for the `expected` part of messages."""

_SYMBOL = {
    ast.Pow: "**",
    ast.Div: "/ (use //)",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitAnd: "&",
    ast.BitXor: "^",
    ast.Invert: "~",
    ast.Not: "not",
    ast.Call: "a call",
    ast.Attribute: "an attribute",
    ast.Subscript: "an index",
    ast.Compare: "a comparison",
    ast.BoolOp: "and/or",
    ast.IfExp: "if/else",
    ast.Lambda: "a lambda",
}
_SKIP = (ast.Expression, ast.Load, *OPS, ast.USub, ast.UAdd)


class ExpressionError(ValueError):
    """`{text}` is not an expression of the language; the message says why."""


def parse_expression(text: str) -> ast.Expression:
    """The syntax tree of `text` (what is between the braces), checked against the language
    and its limits. Raises ExpressionError (`cannot read {text}`, `cannot evaluate ** in
    {text}`, `{text} is too long ...`)."""
    if len(text) > MAX_CHARS:
        raise ExpressionError(
            f"{{{text[:40]}...}} is too long ({len(text)} characters, at most {MAX_CHARS})"
        )
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):  # also "too many nested parentheses"
        raise ExpressionError(f"cannot read {{{text}}}") from None
    terms = 0
    for node in ast.walk(tree):
        if isinstance(node, _SKIP):
            continue
        terms += 1
        if terms > MAX_TERMS:
            raise ExpressionError(f"{{{_cut(text)}}} has more than {MAX_TERMS} terms")
        what = _forbidden(node, text)
        if what:
            raise ExpressionError(f"cannot evaluate {what} in {{{_cut(text)}}}")
    return tree


def _forbidden(node: ast.AST, text: str) -> str:
    """How to name `node` if the language does not allow it, else ''."""
    if isinstance(node, ast.Name):
        return f"{node.id!r}" if node.id.startswith("__") else ""
    if isinstance(node, ast.Constant):
        return "" if type(node.value) is int else f"the constant {_cut(repr(node.value))}"
    if isinstance(node, ast.BinOp):
        return "" if type(node.op) in OPS else _SYMBOL.get(type(node.op), "an operator")
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            return ""
        return _SYMBOL.get(type(node.op), "an operator")
    return _SYMBOL.get(type(node)) or repr(_cut(ast.get_source_segment(text.strip(), node) or ""))


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
