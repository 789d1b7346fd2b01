"""Variant ``ones`` of marlin_asym's correction on the CPU (harness.kernels.marlin.ones):
the extended pack's extra columns dequantize to exactly 1 under both of Marlin's formulas
and leave the weight's own columns as they were, so Marlin's output column N is a_sum; the
variant takes per-column weights only; the functional entry refuses it in one line. Its
kernel and timing are GPU matters (tests/gpu/test_correction_variants.py runs it with every
other correction)."""

from __future__ import annotations

import pytest
import torch

from harness.cases.data import quantize_asymmetric
from harness.kernels.marlin import variants as cv
from harness.kernels.marlin.asym import MarlinAsymPath, marlin_mm_asymmetric
from harness.kernels.marlin.ones import (
    ONES_EXTRA,
    ONES_FALLBACK,
    extended_weight,
    ones_state,
    ones_takes,
)
from harness.kernels.marlin.pack import marlin_pack_asymmetric
from harness.kernels.reference import a_group_sum, implied_weight


def _weight(K=256, N=128, group_size=256, seed=3):
    g = torch.Generator().manual_seed(seed)
    return quantize_asymmetric(torch.randn(N, K, generator=g).T.contiguous(), group_size)


@pytest.mark.parametrize("formula", ["q_minus_8", "q_times_s"])
@pytest.mark.parametrize("group_size", [256, 128])
def test_extra_columns_dequantize_to_one_and_the_weight_is_unchanged(formula, group_size):
    w = _weight(group_size=group_size)
    plain = implied_weight(marlin_pack_asymmetric(w, formula))
    ext = implied_weight(marlin_pack_asymmetric(extended_weight(w, formula), formula))
    assert ext.shape == (w.K, w.N + ONES_EXTRA)
    assert torch.equal(ext[:, :w.N], plain)
    assert torch.equal(ext[:, w.N:], torch.ones(w.K, ONES_EXTRA, dtype=ext.dtype))


def test_marlins_column_n_of_the_extended_pack_is_the_row_sum():
    w = _weight()
    A = torch.randn(5, w.K, generator=torch.Generator().manual_seed(1)).half()
    C_ext = A.double() @ implied_weight(marlin_pack_asymmetric(extended_weight(w, "q_minus_8")))
    assert torch.allclose(C_ext[:, w.N], a_group_sum(A, w.K)[:, 0], rtol=0, atol=1e-9)


def test_the_variant_takes_per_column_weights_and_runs_wide_elsewhere():
    assert ones_takes(2048, 2048) and not ones_takes(128, 2048)
    assert ONES_FALLBACK in cv.CORRECTIONS and cv.ext_id("ones") is None
    assert "ones" in cv.CORRECTIONS and "ones" in cv.STUDIED


def test_the_state_is_built_once_with_the_paths_own_packer():
    w = _weight()
    calls = []

    def packer(weight, formula):
        calls.append((weight.N, formula))
        return marlin_pack_asymmetric(weight, formula)

    state = {"pack": marlin_pack_asymmetric(w, "q_times_s")}
    first = ones_state(state, w, packer)
    assert ones_state(state, w, packer) is first
    assert calls == [(w.N + ONES_EXTRA, "q_times_s")] and first["pack"].N == w.N + ONES_EXTRA
    assert first["c_ext"] == {} and first["workspace"].dtype == torch.int32


def test_an_unknown_formula_is_refused_in_one_line():
    with pytest.raises(ValueError, match="formula: 'q' is not one of q_minus_8, q_times_s"):
        extended_weight(_weight(), "q")


def test_the_functional_entry_refuses_the_variant_in_one_line():
    w = _weight()
    pack = marlin_pack_asymmetric(w)
    A = torch.zeros(1, w.K, dtype=torch.float16)
    C = torch.zeros(1, w.N, dtype=torch.float16)
    with pytest.raises(cv.CorrectionVariantError, match="'ones' runs through MarlinAsymPath"):
        marlin_mm_asymmetric(A, pack, C, torch.zeros(1, dtype=torch.int32), "quanto",
                             variant="ones")


def test_on_the_cpu_the_path_emulates_as_for_every_variant():
    w = _weight()
    path = MarlinAsymPath(variant="ones")
    prepared = path.prepare(w, torch.device("cpu"))
    A = torch.randn(3, w.K, generator=torch.Generator().manual_seed(2)).half()
    out = torch.empty(3, w.N, dtype=torch.float64)
    ref = path.run_variant(prepared, A, out.clone(), "two_kernel")
    assert torch.equal(path.run(prepared, A, out), ref)
