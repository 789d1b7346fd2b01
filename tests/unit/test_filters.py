"""Filter expressions are parsed and interpreted, never eval'ed."""

import pytest

from harness.cases import MATRICES, FilterError, GemmCase, compile_filter


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("M <= 64 and group_size == 128", True),
        ("M > 64 or per_row", False),
        ("not per_row", True),
        ("N % 256 == 0", True),
        ("K // group_size == 16", True),
        ("'attn_qkv' in tags", True),
        ("'mlp_up' not in tags", True),
        ("16 <= M < 32", True),
        ("kind == 'gemm'", True),
        ("groups == 16 and seed == 0", True),
        ("M == -16", False),
    ],
)
def test_expressions(expr, expected):
    case = GemmCase(M=16, N=6144, K=2048, group_size=128, tags=("attn_qkv",))
    assert compile_filter(expr)(case) is expected


def test_filter_selects_from_matrix():
    sel = MATRICES.cases("production", "M <= 64 and group_size == 128")
    assert sel and all(c.M <= 64 and c.group_size == 128 for c in sel)
    assert len(sel) < len(MATRICES.cases("production"))


@pytest.mark.parametrize(
    "expr, needle",
    [
        ("__import__('os').system('true')", "Call is not allowed"),
        ("M.__class__", "Attribute is not allowed"),
        ("groupsize == 128", "unknown field 'groupsize'"),
        ("M <=", "not a valid expression"),
        ("M ** 2 > 4", "Pow is not allowed"),
        ("[M]", "List is not allowed"),
        ("M == 1.5", "not an int, str or bool"),
        ("lambda: 1", "Lambda is not allowed"),
    ],
)
def test_bad_filters_give_one_line_errors(expr, needle):
    with pytest.raises(FilterError) as err:
        compile_filter(expr)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_type_errors_are_reported_per_case():
    pred = compile_filter("M + 'a' == 1")
    with pytest.raises(FilterError, match="cannot be evaluated"):
        pred(GemmCase(M=1, N=128, K=128, group_size=128))


def test_empty_filter_keeps_everything():
    assert compile_filter(None)(GemmCase(M=1, N=128, K=128, group_size=128))
    assert compile_filter("  ")(GemmCase(M=1, N=128, K=128, group_size=128))


@pytest.mark.parametrize("text, says", [
    ("'a' * 100000000000 in tags", "string longer than"),
    ("M * 99999999999999999999 * 999999999999 > 1", "beyond 64 bits"),
    ("(" * 300 + "M" + ")" * 300 + " > 0", "nested too deeply|syntax nodes|not a valid"),
    ("M + " * 600 + "M > 0", "too long"),
    ("M + " * 300 + "M > 0", "syntax nodes"),
])
def test_a_filter_too_large_or_too_slow_is_refused_in_one_line(text, says):
    import re

    from harness.cases.filters import FilterError, compile_filter

    with pytest.raises(FilterError) as exc:
        pred = compile_filter(text)
        pred(MATRICES.cases("smoke")[0])
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 400 and re.search(says, msg), msg
