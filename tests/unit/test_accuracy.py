"""Accuracy metrics: ULP sizes on crafted numbers, ULP errors, stats and their gate."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch

from harness.measure.accuracy import (
    AccuracyStats,
    accuracy_stats,
    rms_ulp_error,
    row_rms,
    ulp_error,
    ulp_size,
)

F16 = np.float16


def up(x: float) -> float:
    """The next fp16 value above x."""
    return float(np.nextafter(F16(x), F16(np.inf)))


def down(x: float) -> float:
    return float(np.nextafter(F16(x), F16(-np.inf)))


# --------------------------------------------------------------------------- ulp_size
@pytest.mark.parametrize("x,ulp", [
    (1.0, 2.0 ** -10),
    (1.5, 2.0 ** -10),
    (down(2.0), 2.0 ** -10),
    (2.0, 2.0 ** -9),
    (3.0, 2.0 ** -9),
    (1024.0, 1.0),
    (2048.0, 2.0),
    (65504.0, 32.0),
    (2.0 ** -14, 2.0 ** -24),      # smallest normal
    (2.0 ** -13, 2.0 ** -23),
    (2.0 ** -15, 2.0 ** -24),      # subnormal range: constant spacing
    (2.0 ** -24, 2.0 ** -24),      # smallest subnormal
    (1e-30, 2.0 ** -24),
    (0.0, 2.0 ** -24),             # zero: the subnormal floor
    (-0.0, 2.0 ** -24),
    (-1.0, 2.0 ** -10),            # sign does not matter
    (-65504.0, 32.0),
    (1e6, 2.0 ** 9),               # beyond fp16's range the binade formula continues
])
def test_ulp_size_fp16(x, ulp):
    assert ulp_size(x, "float16") == ulp


def test_ulp_size_matches_numpy_spacing_for_fp16_values():
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.standard_normal(1000) * 10.0 ** rng.integers(-6, 4, 1000),
                           [2.0 ** -24, 2.0 ** -14, 1.0, 32768.0]]).astype(F16)
    vals = vals[np.isfinite(vals) & (vals != 0)]
    expected = np.spacing(np.abs(vals)).astype(np.float64)   # distance to the next value up
    assert np.array_equal(ulp_size(vals.astype(np.float64)), expected)


@pytest.mark.parametrize("x,ulp", [
    (1.0, 2.0 ** -7), (2.0, 2.0 ** -6), (3.0e38, 2.0 ** 120), (2.0 ** -126, 2.0 ** -133),
    (2.0 ** -130, 2.0 ** -133), (0.0, 2.0 ** -133), (-1.0, 2.0 ** -7),
])
def test_ulp_size_bf16(x, ulp):
    assert ulp_size(x, "bfloat16") == ulp
    assert ulp_size(x, torch.bfloat16) == ulp


def test_ulp_size_nonfinite_and_shapes():
    out = ulp_size(np.array([[np.inf, -np.inf], [np.nan, 1.0]]))
    assert out.shape == (2, 2)
    assert out[0, 0] == np.inf and out[0, 1] == np.inf and np.isnan(out[1, 0])
    assert out[1, 1] == 2.0 ** -10
    assert ulp_size(torch.tensor([4.0], dtype=torch.float16))[0] == 2.0 ** -8
    assert ulp_size(1.0, torch.float16) == ulp_size(1.0, np.float16) == ulp_size(1.0, "fp16")


# --------------------------------------------------------------------------- ulp_error
def test_ulp_error_crafted():
    assert ulp_error(up(1.0), 1.0) == 1.0
    assert ulp_error(down(1.0), 1.0) == 0.5          # the binade below is twice as fine
    assert ulp_error(up(up(2.0)), 2.0) == 2.0
    assert ulp_error(down(65504.0), 65504.0) == 1.0
    assert ulp_error(2.0 ** -24, 0.0) == 1.0          # smallest subnormal vs zero
    assert ulp_error(0.0, 0.0) == 0.0
    assert ulp_error(-0.0, 0.0) == 0.0
    assert ulp_error(3 * 2.0 ** -24, 2.0 ** -24) == 2.0
    assert ulp_error(-1.0, 1.0) == 2.0 / 2.0 ** -10   # a sign flip is 2|x| / ulp
    assert ulp_error(-3.0, 3.0) == 6.0 / 2.0 ** -9
    assert ulp_error(1.0 + 2.0 ** -11, 1.0) == 0.5    # the exact value need not be an fp16
    assert ulp_error(np.inf, 1.0) == np.inf
    assert np.isnan(ulp_error(np.nan, 1.0))
    assert np.isnan(ulp_error(1.0, np.nan))


def test_ulp_error_torch_inputs_and_shape_check():
    out = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
    ref = torch.tensor([[1.0 + 2.0 ** -7, 2.0]], dtype=torch.float64)
    assert ulp_error(out, ref, "bfloat16").tolist() == [[1.0, 0.0]]
    with pytest.raises(ValueError, match="^out:"):
        ulp_error(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="^dtype:"):
        ulp_error(1.0, 1.0, "float8")


# --------------------------------------------------------------------------- accuracy_stats
def test_stats_by_hand():
    ref = np.array([1.0, 2.0, 4.0, 8.0])
    out = np.array([up(1.0), 2.0, up(up(up(4.0))), 8.0])   # +1 ulp, 0, +3 ulp, 0
    s = accuracy_stats(out, ref, ulp_budget=2.0)
    assert s.n == 4 and s.nonfinite == 0 and s.dtype == "float16" and s.ulp_budget == 2.0
    d1, d3 = 2.0 ** -10, 3 * 2.0 ** -8
    assert s.rel_err == pytest.approx((d1 + d3) / 4 / (15 / 4), rel=1e-15)
    assert s.rel_fro_err == pytest.approx(np.hypot(d1, d3) / np.sqrt(85.0), rel=1e-15)
    assert s.max_ulp == 3.0 and s.mean_ulp == 1.0
    assert s.p99_ulp == pytest.approx(2.94, rel=1e-12)   # sorted 0,0,1,3: 1 + 0.97 * 2
    assert s.frac_over_budget == 0.25
    assert s.passes(rel_err_gate=1e-3)
    assert not s.passes(rel_err_gate=1e-5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rel_err = 0.0


def test_stats_rounded_fp16_output_is_within_half_ulp():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((64, 64)) * 3.0
    # NumPy rounds float64 -> float16 once (torch's .half() of a double goes through
    # float32 and can land a hair above half an ULP: double rounding)
    s = accuracy_stats(torch.from_numpy(ref.astype(F16)), torch.from_numpy(ref))
    assert s.max_ulp <= 0.5 and s.mean_ulp > 0.1
    assert 1e-4 < s.rel_err < 5e-4 and s.passes()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_stats_nonfinite_output_is_never_averaged(bad):
    ref = np.linspace(1.0, 2.0, 100)
    out = ref.astype(F16).astype(np.float64)
    out[[3, 50]] = bad
    s = accuracy_stats(out, ref)
    assert s.nonfinite == 2
    assert s.rel_err == s.rel_fro_err == s.max_ulp == s.p99_ulp == s.mean_ulp == np.inf
    assert s.rms_ulp_p99 == s.rms_ulp_max == np.inf
    assert s.frac_over_budget == 0.02
    assert not s.passes(rel_err_gate=1e9)


def test_stats_nonfinite_reference_counts_too():
    ref = np.array([1.0, np.nan, 2.0])
    s = accuracy_stats(np.array([1.0, 1.0, 2.0]), ref)
    assert s.nonfinite == 1 and s.max_ulp == np.inf and not s.passes()


def test_stats_zero_reference():
    assert accuracy_stats(np.zeros(5), np.zeros(5)).rel_err == 0.0
    s = accuracy_stats(np.array([0.0, 2.0 ** -24]), np.zeros(2))
    assert s.rel_err == np.inf and s.max_ulp == 1.0 and s.nonfinite == 0
    assert not s.passes()


def test_stats_bf16_and_budget():
    ref = np.array([1.0, 1.0, 1.0, 1.0])
    out = np.array([1.0, 1.0 + 2.0 ** -7, 1.0 + 3 * 2.0 ** -7, 1.0 + 5 * 2.0 ** -7])
    s = accuracy_stats(torch.tensor(out).bfloat16(), ref, ulp_budget=2.5, dtype=torch.bfloat16)
    assert s.dtype == "bfloat16" and s.max_ulp == 5.0 and s.frac_over_budget == 0.5


@pytest.mark.parametrize("call,field", [
    (lambda: accuracy_stats(np.zeros(2), np.zeros(3)), "out:"),
    (lambda: accuracy_stats(np.zeros(0), np.zeros(0)), "out:"),
    (lambda: accuracy_stats(np.zeros(2), np.zeros(2), ulp_budget=-1), "ulp_budget:"),
    (lambda: accuracy_stats(np.zeros(2), np.zeros(2), dtype="float32"), "dtype:"),
    (lambda: accuracy_stats(["a", "b"], np.zeros(2)), "out:"),
])
def test_invalid_inputs_name_the_field(call, field):
    with pytest.raises(ValueError, match="^" + field):
        call()


# --------------------------------------------------------------------------- scale-aware ULP
def _rms_example():
    """3 x 4, by hand. Row 0: RMS 1, fp16 ulp(1) = 2^-10. Row 1: all zero, the subnormal
    floor 2^-24. Row 2: RMS sqrt((2^-20 + 9 + 16) / 4) = 2.5000..., binade [2, 4): ulp 2^-9."""
    ref = np.array([[1.0, -1.0, 1.0, -1.0],
                    [0.0, 0.0, 0.0, 0.0],
                    [2.0 ** -10, 0.0, 3.0, 4.0]])
    err = np.array([[2.0 ** -10, 0.0, 0.0, -(2.0 ** -9)],     # 1 and 2 ULPs at RMS 1
                    [0.0, 2.0 ** -24, 0.0, 0.0],               # 1 ULP of the floor
                    [2.0 ** -10, 0.0, 0.0, 3 * 2.0 ** -9]])    # 0.5 and 3 ULPs at RMS 2.5
    return ref, ref + err


def test_rms_ulp_by_hand_with_a_zero_row():
    ref, out = _rms_example()
    assert row_rms(ref).tolist() == pytest.approx([1.0, 0.0, np.sqrt((2.0 ** -20 + 25.0) / 4)],
                                                  rel=1e-15)
    assert rms_ulp_error(out, ref).tolist() == [[1.0, 0.0, 0.0, 2.0],
                                                [0.0, 1.0, 0.0, 0.0],
                                                [0.5, 0.0, 0.0, 3.0]]
    s = accuracy_stats(out, ref)
    assert s.rms_ulp_max == 3.0
    # sorted: seven 0s, 0.5, 1, 1, 2, 3; the 0.99 quantile sits at 10.89: 2 + 0.89 x (3 - 2)
    assert s.rms_ulp_p99 == pytest.approx(2.89, rel=1e-12)
    # the per-element figure divides element (2, 0)'s error by the ULP at its own 2^-10
    # (2^-20): 1024 ULPs where the row's scale says half an ULP
    assert s.max_ulp == 1024.0 and ulp_error(out, ref)[2, 0] == 1024.0


def test_rms_ulp_bf16_rows_and_shapes():
    ref = np.array([[3.0, 4.0], [0.0, 0.0]])  # RMS sqrt(12.5) = 3.54 in [2, 4): bf16 ulp 2^-6
    out = ref + np.array([[2.0 ** -6, 2.0 ** -5], [0.0, 2.0 ** -133]])
    assert rms_ulp_error(out, ref, "bfloat16").tolist() == [[1.0, 2.0], [0.0, 1.0]]
    s = accuracy_stats(torch.tensor(out), torch.tensor(ref), dtype=torch.bfloat16)
    assert s.rms_ulp_max == 2.0
    # 1-D: one row; 3-D: rows over the last axis; 0-d: its own magnitude
    assert rms_ulp_error([1.0, 1.0 + 2.0 ** -10], [1.0, 1.0]).tolist() == [0.0, 1.0]
    ref3 = np.stack([ref, 2 * ref])
    assert np.array_equal(rms_ulp_error(ref3 + 2.0 ** -6, ref3, "bfloat16")[0],
                          rms_ulp_error(ref + 2.0 ** -6, ref, "bfloat16"))
    assert rms_ulp_error(1.5, 1.0) == 512.0
    with pytest.raises(ValueError, match="^out:"):
        rms_ulp_error(np.zeros((2, 3)), np.zeros((3, 2)))


def test_rms_ulp_of_a_correctly_rounded_output_is_small():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((32, 512)) * 7.0
    ref[:, :8] *= 1e-6                                   # near-cancelling outputs
    s = accuracy_stats(ref.astype(F16), ref)
    # half an ULP of each element's own value: 0.5 at most up to the RMS's binade, up to 2
    # for elements in the binades above it (this row's largest: 4-5 RMS)
    assert s.max_ulp <= 0.5 and s.rms_ulp_p99 <= 1.0 and s.rms_ulp_max <= 2.0
    noisy = ref + rng.standard_normal(ref.shape) * 7.0 * 2.0 ** -10       # ~1 ULP of noise
    s = accuracy_stats(noisy, ref)
    assert s.max_ulp > 1e4 and 1.0 < s.rms_ulp_p99 < 10.0      # per-element explodes, rms does not


def test_stats_record_fields():
    names = [f.name for f in dataclasses.fields(AccuracyStats)]
    assert names[:10] == ["rel_err", "rel_fro_err", "max_ulp", "p99_ulp", "mean_ulp",
                          "frac_over_budget", "ulp_budget", "nonfinite", "n", "dtype"]


def test_module_does_not_import_torch():
    code = "import sys, harness.measure.accuracy; print('torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"
