"""The device twin of ``accuracy_stats`` against the NumPy definition, field by field."""

from __future__ import annotations

import math

import pytest
import torch

from harness.measure.accuracy import AccuracyInputError, accuracy_stats
from harness.measure.accuracy_torch import accuracy_stats_torch

FIELDS = ("rel_err", "rel_fro_err", "max_ulp", "p99_ulp", "mean_ulp", "frac_over_budget",
          "nonfinite", "n", "dtype", "rms_ulp_p99", "rms_ulp_max", "ulp_budget")


def assert_same(out, ref, dtype="float16", budget=2.0):
    want = accuracy_stats(out, ref, budget, dtype)
    got = accuracy_stats_torch(out, ref, budget, dtype)
    for f in FIELDS:
        a, b = getattr(want, f), getattr(got, f)
        if isinstance(a, float) and math.isfinite(a):
            assert b == pytest.approx(a, rel=1e-12, abs=0.0), f
        else:
            assert a == b, f


def cases(device="cpu"):
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(64, 96, generator=g, dtype=torch.float64) * 3
    ref[3, 5] = 0.0
    ref[4] = 0.0                                    # an all-zero row
    ref[5, :4] = torch.tensor([6.1e-5, 1e-7, -2.0 ** -24, 2.0 ** -14], dtype=torch.float64)
    ref[6, 0] = 1e6                                 # a row dominated by one element
    out16 = (ref + 1e-3 * torch.randn(ref.shape, generator=g, dtype=torch.float64)).half()
    yield out16.to(device), ref.to(device), "float16"
    yield ref.to(torch.bfloat16).to(device), ref.to(device), "bfloat16"
    yield ref.half().to(device), ref.to(device), "float16"          # correctly rounded
    yield out16[0].to(device), ref[0].to(device), "float16"         # 1-D: one row
    odd = torch.randn(3, 1001, generator=g, dtype=torch.float64)    # p99 between elements
    yield (odd * 1.01).half().to(device), odd.to(device), "float16"


@pytest.mark.parametrize("i", range(5))
def test_matches_numpy_on_cpu(i):
    out, ref, dtype = list(cases())[i]
    assert_same(out, ref, dtype)


def test_nonfinite_outputs_match_and_fail():
    ref = torch.ones(8, 8, dtype=torch.float64)
    out = ref.clone().half()
    out[1, 2] = float("nan")
    out[3, 3] = float("inf")
    assert_same(out, ref)
    s = accuracy_stats_torch(out, ref)
    assert s.nonfinite == 2 and not s.passes() and s.rel_err == float("inf")


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(AccuracyInputError, match="shape"):
        accuracy_stats_torch(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64))
    with pytest.raises(AccuracyInputError, match="empty"):
        accuracy_stats_torch(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.float64))
    with pytest.raises(AccuracyInputError, match="dtype"):
        accuracy_stats_torch(torch.zeros(2), torch.zeros(2, dtype=torch.float64), dtype="int8")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
def test_matches_numpy_on_the_gpu():
    for out, ref, dtype in cases("cuda"):
        assert_same(out, ref, dtype)
