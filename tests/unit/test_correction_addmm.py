"""The ``addmm`` correction variant's math on the CPU (harness/kernels/marlin/addmm.py):
the fp16 split keeps about 22 bits (``lo`` loses some below fp16's normal range), the
three-term product gives the correction within the study's 2-ULP bound of the float64
reference, and a call whose shapes do not fit is refused in one line. Its speed is a GPU
question (`harness study correction`)."""

from __future__ import annotations

import pytest
import torch

from harness.kernels.marlin import variants as cv
from harness.kernels.marlin.addmm import (
    ADDMM,
    addmm_correction,
    delta_operand,
    refuse_flags,
    split_half,
)
from harness.kernels.reference import apply_marlin_correction


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in units of the fp16 spacing at ``exact``."""
    e = exact.to(torch.float16)
    spacing = (torch.nextafter(e.abs(), torch.tensor(float("inf"), dtype=torch.float16))
               - e.abs()).double()
    return (got.double() - exact).abs() / spacing


def test_the_split_keeps_about_22_bits():
    """To 2^-21 relative, or 2^-24 absolute where ``lo`` falls below fp16's normal range
    (|x| under about 0.03): the absolute error a group sum near zero adds to a product."""
    x = torch.randn(4096, dtype=torch.float64).mul(3).to(torch.float32)
    hi, lo = split_half(x)
    assert hi.dtype == lo.dtype == torch.float16
    err = ((hi.double() + lo.double()) - x.double()).abs()
    assert (err <= torch.clamp(x.double().abs() * 2.0 ** -21, min=2.0 ** -24)).all()
    assert (hi.double() - x.double()).abs().div(x.double().abs()).max() > 2.0 ** -13
    with pytest.raises(TypeError, match="float32"):
        split_half(x.double())


@pytest.mark.parametrize("group_rows", [128, 256])     # 256 = K: a per-column weight
def test_the_correction_is_within_two_ulps_of_the_float64_reference(group_rows):
    g = torch.Generator().manual_seed(41)
    M, K, N = 64, 256, 96
    A = torch.randn(M, K, generator=g).to(torch.float16)
    C = torch.randn(M, N, generator=g).mul(4).to(torch.float16)
    delta = torch.randn(K // group_rows, N, generator=g).mul(0.05).to(torch.float32)
    exact = apply_marlin_correction(C, A, delta, group_rows)
    got = addmm_correction(A, C.clone(), delta_operand(delta), group_rows)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    assert _ulps(got, exact).max() <= 2
    # plain fp16 operands (no split) are what the split is for: they miss the bound
    a_sum = A.double().view(M, -1, group_rows).sum(2)
    plain = C.double() + (a_sum.to(torch.float16).double() @ delta.to(torch.float16).double())
    assert _ulps(plain.to(torch.float16), exact).max() > 2


def test_shapes_that_do_not_fit_are_refused_in_one_line():
    A = torch.zeros(4, 256, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"^addmm_correction: A \(4, 256\), C \(4, 8\)"):
        addmm_correction(A, torch.zeros(4, 8, dtype=torch.float16),
                         delta_operand(torch.zeros(3, 8)), 128)


def test_the_variant_is_a_correction_the_study_measures():
    assert ADDMM in cv.CORRECTIONS and ADDMM in cv.STUDIED
    assert cv.ext_id(ADDMM) is None and ADDMM not in cv.EXT_VARIANTS
    assert cv.concrete_variant(ADDMM, 1024) == ADDMM


def test_planted_flags_are_refused_in_one_line():
    refuse_flags(0)
    with pytest.raises(ValueError, match=r"^variant 'addmm': correction flags 4 act on the CUDA"):
        refuse_flags(4)
