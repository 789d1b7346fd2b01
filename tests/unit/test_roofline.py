"""Byte models, the roofline arithmetic and the impossible-time rejection, by hand."""

from __future__ import annotations

import math

import pytest

from harness.cases.case import GemmCase
from harness.kernels.base import GemmPath
from harness.kernels.registry_load import load_all
from harness.measure.roofline import Peaks, bytes_moved, datasheet_peaks, roofline

CASE = GemmCase(M=16, N=8192, K=8192, group_size=128)   # 64 groups
A_C = 16 * 8192 * 2 + 16 * 8192 * 2                      # 524288


@pytest.mark.parametrize("path, weight", [
    ("native_int4", 33554432 + 64 * 8192 * 2 + 64 * 8192 * 2),
    ("marlin_asym", 33554432 + 64 * 8192 * 2 + 64 * 8192 * 4),
    ("marlin_fused_zero", 33554432 + 64 * 8192 * 2 * 2),
    ("tinygemm", 33554432 + 64 * 8192 * 4),
    ("fp16_cache", 8192 * 8192 * 2),
])
def test_bytes_per_path(path, weight):
    bm = bytes_moved(path, CASE)
    assert bm.weight == weight
    assert bm.total == weight + A_C
    assert bm.formula
    assert bytes_moved(load_all().get(path), CASE) == bm       # the path object is asked


def test_an_unknown_path_or_one_without_a_byte_model_is_an_error():
    """Never a default model: a name no path has, or a path that declares no bytes."""
    with pytest.raises(ValueError, match="unknown path 'something_new'"):
        bytes_moved("something_new", CASE)
    with pytest.raises(ValueError, match="unknown path"):
        roofline(CASE, "something_new", 20.0, None, None)

    class NoModel(GemmPath):
        name = "no_model"

        def unavailable_reason(self, device):
            return None

        def prepare(self, weight, device):
            raise AssertionError

        def run(self, prepared, A, out):
            raise AssertionError

    with pytest.raises(NotImplementedError, match="no_model.*byte model"):
        bytes_moved(NoModel(), CASE)


def test_per_row_has_one_group():
    case = GemmCase(M=1, N=2048, K=2048, group_size=2048)
    assert bytes_moved("marlin_asym", case).weight == 2048 * 2048 // 2 + 2048 * 2 + 2048 * 4


def test_swiglu_pair_moves_two_weights():
    pair = GemmCase(M=16, N=8192, K=8192, group_size=128, kind="swiglu_pair")
    assert bytes_moved("fp16_cache", pair).total == 2 * 8192 * 8192 * 2 + A_C


def test_roofline_hand_computed():
    measured = Peaks(gbps=4000.0, tflops=800.0, source="test")
    bm = bytes_moved("marlin_asym", CASE).total            # 37224448 bytes
    t_bytes = bm / 4000e9 * 1e6                            # 9.306 us
    t_flops = 2 * 16 * 8192 * 8192 / 800e12 * 1e6          # 2.684 us
    rl = roofline(CASE, "marlin_asym", 20.0, measured, None)
    assert rl.floor_us == pytest.approx(max(t_bytes, t_flops))
    assert rl.floor_us == pytest.approx(9.306112)
    assert rl.pct_roofline == pytest.approx(100 * 9.306112 / 20.0)
    assert rl.tflops == pytest.approx(2 * 16 * 8192 * 8192 / 20e-6 / 1e12)
    assert rl.gbps == pytest.approx(bm / 20e-6 / 1e9)
    assert rl.bytes_moved == bm and rl.rejected_reason == ""


def test_compute_bound_floor():
    big = GemmCase(M=8192, N=8192, K=8192, group_size=128)
    rl = roofline(big, "fp16_cache", 2000.0, Peaks(4000.0, 800.0, "t"), None)
    assert rl.floor_us == pytest.approx(2 * 8192 ** 3 / 800e12 * 1e6)


def test_time_below_datasheet_floor_is_rejected():
    h200 = datasheet_peaks("NVIDIA H200", None)
    assert (h200.gbps, h200.tflops) == (4800.0, 989.0)
    floor = bytes_moved("marlin_asym", CASE).total / 4800e9 * 1e6   # 7.755 us
    bad = roofline(CASE, "marlin_asym", floor * 0.9, None, h200, l2_cold=True)
    assert "below the physical floor" in bad.rejected_reason
    good = roofline(CASE, "marlin_asym", floor * 1.01, None, h200, l2_cold=True)
    assert good.rejected_reason == ""
    # Working set inside 3 x L2: only the compute half of the floor is a hard limit.
    warm = roofline(CASE, "marlin_asym", floor * 0.9, None, h200, l2_cold=False)
    assert warm.rejected_reason == ""
    assert warm.impossible_floor_us == pytest.approx(2 * 16 * 8192 * 8192 / 989e12 * 1e6)


def test_datasheet_lookup_and_fallback():
    assert datasheet_peaks("NVIDIA GH200 480GB", None).gbps == 4900.0
    assert datasheet_peaks("NVIDIA H100 PCIe", None).tflops == 756.0
    assert datasheet_peaks("NVIDIA GeForce RTX 4090", None).gbps == 1008.0
    unknown = datasheet_peaks("Mystery GPU", Peaks(1000.0, 100.0, "m"))
    assert unknown.gbps == pytest.approx(1150.0) and unknown.tflops == pytest.approx(115.0)
    assert datasheet_peaks("Mystery GPU", None) is None


def test_non_positive_time_is_flagged():
    rl = roofline(CASE, "native_int4", 0.0, None, None)
    assert math.isnan(rl.tflops) and "not a positive number" in rl.rejected_reason
