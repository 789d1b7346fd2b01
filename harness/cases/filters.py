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


#: Bounds that keep a filter's evaluation small whatever it says: its text, its parse
#: tree, and every value it computes (checked BEFORE an operation that would exceed
#: them, so ``'a' * 100000000000`` is refused without building the string).
MAX_FILTER_CHARS = 2000
MAX_FILTER_NODES = 400
MAX_STR_LEN = 10_000
MAX_INT_BITS = 64


def _bounded(op: type, left, right, text: str):
    """``left op right`` unless the result would exceed the bounds above."""
    if op is ast.Mult:
        strs = [v for v in (left, right) if isinstance(v, str)]
        ints = [v for v in (left, right) if isinstance(v, int) and not isinstance(v, bool)]
        if strs and ints and len(strs[0]) * max(ints[0], 0) > MAX_STR_LEN:
            raise FilterError(
                f"filter {_short(text)}: a string longer than {MAX_STR_LEN} characters "
                "would be built; filters compare case fields, keep values small"
            )
        if len(ints) == 2 and ints[0].bit_length() + ints[1].bit_length() > MAX_INT_BITS:
            raise FilterError(
                f"filter {_short(text)}: an integer beyond {MAX_INT_BITS} bits would be built"
            )
    if op is ast.Add and isinstance(left, str) and isinstance(right, str) \
            and len(left) + len(right) > MAX_STR_LEN:
        raise FilterError(
            f"filter {_short(text)}: a string longer than {MAX_STR_LEN} characters would be built"
        )
    out = _BIN[op](left, right)
    if isinstance(out, int) and out.bit_length() > MAX_INT_BITS:
        raise FilterError(
            f"filter {_short(text)}: an integer beyond {MAX_INT_BITS} bits would be built"
        )
    return out


def _short(text: str, width: int = 80) -> str:
    """``text`` quoted for a one-line error, cut to ``width`` characters."""
    return repr(text) if len(text) <= width else repr(text[:width]) + "..."


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
            raise FilterError(
                f"filter {_short(text)}: operator {type(node.op).__name__} is not allowed"
            )
        _check(node.operand, text)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _CMP:
                raise FilterError(
                    f"filter {_short(text)}: comparison {type(op).__name__} is not allowed"
                )
        _check(node.left, text)
        for c in node.comparators:
            _check(c, text)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BIN:
            raise FilterError(
                f"filter {_short(text)}: operator {type(node.op).__name__} is not allowed"
            )
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.Name):
        if node.id not in FILTER_FIELDS:
            raise FilterError(
                f"filter {_short(text)}: unknown field {node.id!r}; valid fields: {_fields_hint()}"
            )
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, str, bool)):
            raise FilterError(
                f"filter {_short(text)}: constant {node.value!r} is not an int, str or bool"
            )
    else:
        raise FilterError(
            f"filter {_short(text)}: {type(node).__name__} is not allowed "
            f"(use comparisons, and/or/not, + - * // %, fields {_fields_hint()})"
        )


def _value(case: GemmCase, name: str):
    return getattr(case, name)


def _interpret(node: ast.AST, case: GemmCase, text: str = ""):
    if isinstance(node, ast.Expression):
        return _interpret(node.body, case, text)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_interpret(v, case, text) for v in node.values)
        return any(_interpret(v, case, text) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        v = _interpret(node.operand, case, text)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.Compare):
        left = _interpret(node.left, case, text)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _interpret(comp, case, text)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp):
        return _bounded(type(node.op), _interpret(node.left, case, text),
                        _interpret(node.right, case, text), text)
    if isinstance(node, ast.Name):
        return _value(case, node.id)
    if isinstance(node, ast.Constant):
        return node.value
    raise FilterError(f"unexpected node {type(node).__name__}")  # _check prevents this


def compile_filter(text: str | None) -> Callable[[GemmCase], bool]:
    """Parse ``text`` once and return a predicate over cases. Empty/None keeps every case."""
    if text is None or not text.strip():
        return lambda case: True
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(
            f"filter of {len(text)} characters is too long (at most {MAX_FILTER_CHARS})"
        )
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        why = exc.msg if isinstance(exc, SyntaxError) else "nested too deeply"
        raise FilterError(f"filter {_short(text)} is not a valid expression: {why}") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_FILTER_NODES:
        raise FilterError(
            f"filter {_short(text)}: {nodes} syntax nodes, at most {MAX_FILTER_NODES}"
        )
    _check(tree, text)

    def predicate(case: GemmCase) -> bool:
        try:
            return bool(_interpret(tree, case, text))
        except TypeError as exc:
            raise FilterError(
                f"filter {_short(text)} cannot be evaluated on {case.id}: {exc}"
            ) from None
        except ZeroDivisionError:
            raise FilterError(f"filter {_short(text)} divides by zero on {case.id}") from None

    return predicate


def apply_filter(cases: Iterable[GemmCase], text: str | None) -> list[GemmCase]:
    pred = compile_filter(text)
    return [c for c in cases if pred(c)]
