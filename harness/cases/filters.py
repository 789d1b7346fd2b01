"""Filter expressions over case fields, parsed with ``ast`` and interpreted here.

Never ``eval``: the expression is parsed into a tree and only a whitelist of node types
is interpreted. Grammar (Python syntax subset)::

    expr   := expr and expr | expr or expr | not expr | cmp
    cmp    := term (< | <= | > | >= | == | != | in | not in) term ...
    term   := field | int | str | True | False | term (+ - * // %) term | (expr)

Fields: M, N, K, group_size, seed, kind, tags, groups, per_row. ``'attn_qkv' in tags``
tests a tag. Examples: ``M <= 64 and group_size == 128``, ``N % 256 != 0``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable

from .case import FILTER_FIELDS, GemmCase

_CMP = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BIN = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}


class FilterError(ValueError):
    """A filter expression that cannot be parsed or uses something not allowed."""


def _fields_hint() -> str:
    return ", ".join(FILTER_FIELDS)


def _check(node: ast.AST, text: str) -> None:
    """Reject every node type outside the grammar, naming it."""
    if isinstance(node, ast.Expression):
        _check(node.body, text)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, text)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.Not, ast.USub)):
            raise FilterError(f"filter {text!r}: operator {type(node.op).__name__} is not allowed")
        _check(node.operand, text)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _CMP:
                raise FilterError(f"filter {text!r}: comparison {type(op).__name__} is not allowed")
        _check(node.left, text)
        for c in node.comparators:
            _check(c, text)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BIN:
            raise FilterError(f"filter {text!r}: operator {type(node.op).__name__} is not allowed")
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.Name):
        if node.id not in FILTER_FIELDS:
            raise FilterError(
                f"filter {text!r}: unknown field {node.id!r}; valid fields: {_fields_hint()}"
            )
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, str, bool)):
            raise FilterError(f"filter {text!r}: constant {node.value!r} is not an int, str or bool")
    else:
        raise FilterError(
            f"filter {text!r}: {type(node).__name__} is not allowed "
            f"(use comparisons, and/or/not, + - * // %, fields {_fields_hint()})"
        )


def _value(case: GemmCase, name: str):
    return getattr(case, name)


def _interpret(node: ast.AST, case: GemmCase):
    if isinstance(node, ast.Expression):
        return _interpret(node.body, case)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_interpret(v, case) for v in node.values)
        return any(_interpret(v, case) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        v = _interpret(node.operand, case)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.Compare):
        left = _interpret(node.left, case)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _interpret(comp, case)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp):
        return _BIN[type(node.op)](_interpret(node.left, case), _interpret(node.right, case))
    if isinstance(node, ast.Name):
        return _value(case, node.id)
    if isinstance(node, ast.Constant):
        return node.value
    raise FilterError(f"unexpected node {type(node).__name__}")  # _check prevents this


def compile_filter(text: str | None) -> Callable[[GemmCase], bool]:
    """Parse ``text`` once and return a predicate over cases. Empty/None keeps every case."""
    if text is None or not text.strip():
        return lambda case: True
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise FilterError(f"filter {text!r} is not a valid expression: {exc.msg}") from None
    _check(tree, text)

    def predicate(case: GemmCase) -> bool:
        try:
            return bool(_interpret(tree, case))
        except TypeError as exc:
            raise FilterError(f"filter {text!r} cannot be evaluated on {case.id}: {exc}") from None
        except ZeroDivisionError:
            raise FilterError(f"filter {text!r} divides by zero on {case.id}") from None

    return predicate


def apply_filter(cases: Iterable[GemmCase], text: str | None) -> list[GemmCase]:
    pred = compile_filter(text)
    return [c for c in cases if pred(c)]
