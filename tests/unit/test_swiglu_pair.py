"""SwiGLU gate/up pair cases (harness.kernels.swiglu_pair) on the CPU paths."""

import pytest
import torch
import torch.nn.functional as F

from harness.cases import MATRICES
from harness.cases.case import GemmCase
from harness.cases.data import case_data
from harness.kernels import dispatch
from harness.kernels.base import PATHS
from harness.kernels.reference import reference_fp64
from harness.kernels.registry_load import load_all
from harness.kernels.swiglu_pair import (
    FUSED_NAME,
    FusedNativeSwiGLU,
    PairPath,
    case_weights,
    paths_for_case,
    reference_case,
)

CPU = torch.device("cpu")
PAIR = GemmCase(M=3, N=256, K=256, group_size=128, seed=7, kind="swiglu_pair")
GEMM = GemmCase(M=3, N=256, K=256, group_size=128, seed=7)


@pytest.fixture(scope="module")
def native():
    load_all()
    return PATHS.get("native_int4")


def test_reference_is_silu_of_gate_times_up():
    d = case_data(PAIR)
    A = d.A
    ref = reference_case(A, d.weights)
    g, u = reference_fp64(A, d.weights[0]), reference_fp64(A, d.weights[1])
    assert ref.dtype == torch.float64
    assert torch.equal(ref, F.silu(g) * u)
    assert not torch.equal(d.weights[0].q, d.weights[1].q)     # two different weights
    with pytest.raises(ValueError, match="3 weights"):
        reference_case(A, d.weights + d.weights[:1])


def test_paths_for_case_adds_pairs_and_the_fused_native_only_for_pairs(native):
    fp16 = PATHS.get("fp16_cache")
    assert paths_for_case(GEMM, [native, fp16]) == [native, fp16]
    got = paths_for_case(PAIR, [native, fp16])
    assert [p.name for p in got] == ["native_int4", FUSED_NAME, "fp16_cache"]
    assert isinstance(got[0], PairPath) and isinstance(got[1], FusedNativeSwiGLU)
    assert "swiglu_pair cases only" in got[0].unsupported_reason(GEMM)
    assert "swiglu_pair cases only" in got[1].unsupported_reason(GEMM)


def test_pair_and_fused_match_the_reference_and_each_other(native):
    d = case_data(PAIR)
    ref = reference_case(d.A, d.weights)
    outs = {}
    for p in (PairPath(native), FusedNativeSwiGLU(native), PairPath(PATHS.get("fp16_cache"))):
        prep = p.prepare(case_weights(d, CPU), CPU)
        out = torch.full((PAIR.M, PAIR.N), float("nan"), dtype=prep.output_dtype)
        p.run(prep, d.A.to(prep.input_dtype), out)
        assert torch.isfinite(out).all(), p.name
        rel = float((out.double() - ref).abs().mean() / ref.abs().mean())
        assert rel < 1e-3, (p.name, rel)
        outs[p.name] = out
    # one GEMM over [gate | up] computes each column as the two separate GEMMs do
    assert torch.equal(outs["native_int4"], outs[FUSED_NAME])


def test_a_pair_path_needs_the_weight_pair(native):
    d = case_data(GEMM)
    with pytest.raises(ValueError, match=r"\(gate, up\) weight tuple"):
        PairPath(native).prepare(case_weights(d, CPU), CPU)


def test_dispatcher_column_of_a_pair_is_the_fused_native_kernel():
    dec = dispatch.decide_for_case(PAIR, CPU)
    assert dec.path == FUSED_NAME and "quant_swiglu" in dec.fallback_reason


def test_swiglu_matrix_is_pairs_of_the_mlp_shape():
    cases = MATRICES.cases("swiglu")
    assert len(cases) == 14 and all(c.kind == "swiglu_pair" for c in cases)
    assert {(c.N, c.K) for c in cases} == {(8192, 2048)}
    assert {c.group_size for c in cases} == {128, 2048}
    assert all(c.flops == 4 * c.M * c.N * c.K for c in cases)


def test_the_ab_step_benches_derived_rows_through_the_path_they_come_from():
    """``harness job``'s A/B step passes ``--paths`` to a bench of any commit, which takes
    registered names only: its torch-free table of derived names must match what
    ``paths_for_case`` derives (found on the CPU: an A/B of a swiglu row failed with
    "unknown path 'native_int4_fused'")."""
    from harness.engines.bench_runner import DERIVED_FROM, bench_paths

    load_all()
    derived = {p.name: src.name for src in PATHS.select(None)
               for p in paths_for_case(PAIR, [src]) if p.name != src.name}
    assert derived == DERIVED_FROM
    assert bench_paths({"native_int4_fused", "fp16_cache"}) == ["fp16_cache", "native_int4"]
    assert all(name in PATHS.names() for name in bench_paths(set(derived)))
