"""The case record, the registry and the matrices."""

import pytest

from harness.cases import MATRICES, GemmCase, UnknownMatrixError
from harness.cases.matrices import PRODUCTION_BT, PRODUCTION_LAYERS


def test_id_is_stable_and_encodes_shape():
    c = GemmCase(M=16, N=6144, K=2048, group_size=128)
    assert c.id == "M16-N6144-K2048-g128-s0"
    assert GemmCase(M=1, N=2048, K=8192, group_size=8192, seed=3).id == "M1-N2048-K8192-gK-s3"
    pair = GemmCase(M=4, N=256, K=256, group_size=128, kind="swiglu_pair")
    assert pair.id.startswith("swiglu_pair-")


def test_tags_do_not_change_identity():
    a = GemmCase(M=2, N=256, K=256, group_size=128, tags=("x",))
    b = GemmCase(M=2, N=256, K=256, group_size=128, tags=("y",))
    assert a == b and a.id == b.id


def test_record_is_frozen():
    c = GemmCase(M=1, N=128, K=128, group_size=128)
    with pytest.raises(AttributeError):
        c.M = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(M=0, N=128, K=128, group_size=128), "M"),
        (dict(M=1, N=-128, K=128, group_size=128), "N"),
        (dict(M=1, N=128, K=0, group_size=128), "K"),
        (dict(M=1, N=128, K=256, group_size=0), "group_size"),
        (dict(M=1, N=128, K=200, group_size=128), "group_size"),   # does not divide K
        (dict(M=1, N=128, K=128, group_size=256), "group_size"),   # larger than K
        (dict(M=1.5, N=128, K=128, group_size=128), "M"),
        (dict(M=True, N=128, K=128, group_size=128), "M"),
        (dict(M=1, N=128, K=128, group_size=128, seed=-1), "seed"),
        (dict(M=1, N=128, K=128, group_size=128, kind="conv"), "kind"),
        (dict(M=1, N=128, K=128, group_size=128, tags=("a b",)), "tags"),
    ],
)
def test_invalid_cases_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"GemmCase\.{field}"):
        GemmCase(**kwargs)


def test_round_trip_through_dict():
    c = GemmCase(M=17, N=384, K=512, group_size=64, seed=9, tags=("a", "b"))
    d = c.to_dict()
    assert d["id"] == c.id and d["tags"] == "a;b"
    back = GemmCase.from_dict(d)
    assert back == c and back.tags == c.tags


def test_production_matrix_covers_the_seed_model():
    cases = MATRICES.cases("production")
    shapes = {(c.N, c.K) for c in cases}
    assert shapes == {(n, k) for _, n, k in PRODUCTION_LAYERS}
    assert {c.M for c in cases} == set(PRODUCTION_BT)
    # per-row (group_size == K) and g128 for every shape and BT
    assert len(cases) == len(shapes) * len(PRODUCTION_BT) * 2
    gate_up = [c for c in cases if c.N == 8192 and c.K == 2048]
    assert all({"mlp_gate", "mlp_up"} <= set(c.tags) for c in gate_up)


def test_parity_matrix_stage_counts_and_coverage():
    cases = MATRICES.cases("parity")
    count = {s: sum(s in c.tags for c in cases)
             for s in ("pack_sym", "py_correction", "corr_kernel", "mm_asym")}
    assert count == {"pack_sym": 3, "py_correction": 4, "corr_kernel": 5, "mm_asym": 7}
    assert any(c.M < 16 for c in cases)
    assert any(c.M % 16 for c in cases if c.M > 16)
    assert len({c.groups for c in cases}) >= 4
    biggest = max((c for c in cases if "mm_asym" in c.tags), key=lambda c: c.M * c.N * c.K)
    assert (biggest.M, biggest.N, biggest.K, biggest.groups) == (64, 2048, 8192, 64)


def test_edges_cover_both_sides_of_every_precondition():
    cases = MATRICES.cases("edges")
    ms = {c.M for c in cases if c.N == 2048 and c.K == 2048 and c.group_size == 128}
    assert {15, 16} <= ms
    assert any(c.K % 128 for c in cases) and any(c.K % 128 == 0 for c in cases)
    assert any(c.N % 128 for c in cases) and any(c.N % 128 == 0 for c in cases)
    assert any(c.N % 256 and c.M > 16 for c in cases)
    assert any(c.N % 256 == 0 and c.M > 16 for c in cases)
    assert any(c.per_row for c in cases)
    assert any(c.N == 50257 for c in cases)


def test_sweep_is_powers_of_two_to_4096():
    ms = sorted({c.M for c in MATRICES.cases("sweep")})
    assert ms == [2 ** p for p in range(13)]


def test_every_matrix_has_unique_ids_and_its_own_tag():
    for name in MATRICES.names():
        cases = MATRICES.cases(name)
        assert cases, name
        assert len({c.id for c in cases}) == len(cases)
        assert all(name in c.tags for c in cases)


def test_unknown_matrix_lists_valid_ones():
    with pytest.raises(UnknownMatrixError) as err:
        MATRICES.cases("nope")
    msg = str(err.value)
    assert "nope" in msg and "production" in msg and "smoke" in msg and "\n" not in msg
