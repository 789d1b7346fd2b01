"""`harness study kernels` without a GPU: which profiler kernels are whose, the bytes each
kernel must move, the floor and the ratio, the summary, and the one-line refusals."""

from __future__ import annotations

import math

import pytest

from harness.cases import GemmCase
from harness.cli import main
from harness.studies.correction_kernels import (
    VARIANT_KERNELS,
    is_copy_activity,
    kernel_bytes,
    kernel_class,
    kernel_rows,
    medians_by_kernel,
    parse_args,
    stage_options,
    summary_lines,
)

# kernel names as torch.profiler reports them (CUPTI's demangled names)
ASUM = ("harness_int4::corr_detail::(anonymous namespace)::asum_kernel(__half const*, float*, "
        "int, int, int, int, int)")
TILE = ("void harness_int4::corr_detail::(anonymous namespace)::corr_tile_kernel<4, false, "
        "false>(...)")
SEED_SUM = "harness_int4::(anonymous namespace)::a_group_sum_kernel(__half const*, float*, int)"
SEED_ACC = "void harness_int4::(anonymous namespace)::correction_accum_kernel<false>(__half*, ...)"
FLUSH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"
EMPTY = "void harness_int4::corr_detail::(anonymous namespace)::empty_kernel<false>()"
FLAT = ("void harness_int4::corr_detail::(anonymous namespace)::asum_flat_small_kernel<4>"
        "(__half const*, float*, long, int)")
STREAM = ("void harness_int4::corr_detail::(anonymous namespace)::corr_stream_kernel<4, false>"
          "(__half*, float const*, float const*, int, int, int, int)")
SPLIT = ("void harness_int4::corr_detail::(anonymous namespace)::corr_stream_split_kernel<true>"
         "(__half*, float const*, float const*, int, int, int, int, int, int)")


def test_profiler_names_map_to_the_studys_kernels():
    assert [kernel_class(n) for n in (ASUM, TILE, SEED_SUM, SEED_ACC, FLUSH, EMPTY)] == \
           ["asum", "corr_tile", "a_group_sum", "correction_accum", None, "empty"]
    assert [kernel_class(n) for n in (FLAT, STREAM)] == ["asum_flat", "corr_stream"]
    # the decode form (M <= 16) is the same stage: an H200 study left its rows empty
    assert kernel_class(SPLIT) == "corr_stream"
    assert kernel_class("void at::native::direct_copy_kernel_cuda(...)") is None


def test_the_copy_of_the_same_bytes_beside_the_floor():
    """At decode the empty kernel (1.8 us here) is the issue's floor; the copy of the same
    bytes (2.4 us: one memory round trip) is the larger, and copy_ratio divides by it."""
    case = GemmCase(1, 2048, 2048, 128)
    sizes = {k: kernel_bytes(k, 1, 2048, 2048, 128) for k in ("asum_flat", "corr_stream")}
    copies = {sizes["asum_flat"]: 2.4, sizes["corr_stream"]: 1.0}
    rows = kernel_rows(case, "stream", {"asum_flat": (3.0, 9), "corr_stream": (2.0, 9)},
                       4300.0, 1.8, "warm", copies=copies)
    flat, stream = rows
    assert flat.floor_us == 1.8 and flat.copy_us == 2.4
    assert flat.ratio == pytest.approx(3.0 / 1.8) and flat.copy_ratio == pytest.approx(3.0 / 2.4)
    assert stream.copy_ratio == pytest.approx(2.0 / 1.8)        # the floor is the larger one
    assert math.isnan(kernel_rows(case, "stream", {}, 4300.0, 1.8, "warm")[0].copy_ratio)
    [line] = [ln for ln in summary_lines(rows) if "asum_flat" in ln]
    assert "vs the copy of its bytes: median 1.25, 1/1 within" in line


def test_bytes_each_kernel_must_move():
    M, N, K, g = 1024, 6144, 2048, 2048            # one group: G = 1
    assert kernel_bytes("asum", M, N, K, g) == 2 * M * K + 4 * M
    assert kernel_bytes("corr_tile", M, N, K, g) == 4 * M * N + 4 * M + 4 * N
    assert kernel_bytes("corr_tile+sum", M, N, K, g) == 4 * M * N + 2 * M * K + 4 * N
    # the figure: corr_tile at M=1024, N=6144 moves the 12.6 MB output twice
    assert kernel_bytes("corr_tile", M, N, K, g) / 1e6 == pytest.approx(25.2, rel=0.01)
    with pytest.raises(ValueError, match="kernel 'marlin' is not one of"):
        kernel_bytes("marlin", M, N, K, g)


def test_rows_floor_ratio_and_what_is_left_out():
    case = GemmCase(1024, 6144, 2048, 2048)
    spans = [(TILE, float(i), 22.0 + i % 3) for i in range(9)] + \
            [(ASUM, 0.0, 5.0)] * 9 + [(FLUSH, 0.0, 300.0)] * 9
    med = medians_by_kernel(spans, "side_stream")
    assert med == {"corr_tile": (23.0, 9), "asum": (5.0, 9)}      # the flush is not counted
    rows = kernel_rows(case, "side_stream", med, copy_gbps=4300.0, empty_us=1.5, l2="warm")
    assert [r.kernel for r in rows] == list(VARIANT_KERNELS["side_stream"])
    tile = rows[1]
    assert tile.bw_floor_us == pytest.approx(25_194_496 / 4.3e6)     # 5.86 us
    assert tile.floor_us == tile.bw_floor_us and tile.ratio == pytest.approx(23.0 / 5.859, 1e-3)
    assert not tile.within                                           # 3.9x its floor
    asum = rows[0]
    assert asum.bw_floor_us == pytest.approx((2 * 1024 * 2048 + 4 * 1024) / 4.3e6)
    assert asum.ratio == pytest.approx(5.0 / asum.floor_us)
    # at decode the empty kernel is the floor
    tiny = kernel_rows(GemmCase(1, 2048, 2048, 128), "side_stream",
                       {"asum": (2.0, 9), "corr_tile": (2.5, 9)}, 4300.0, 1.8, "warm")
    assert all(r.floor_us == 1.8 for r in tiny) and [r.within for r in tiny] == [True, True]
    # fused's tile sums A itself; a kernel missing from the profile is NaN with a note
    fused = kernel_rows(case, "fused", medians_by_kernel([(TILE, 0.0, 30.0)], "fused"),
                        4300.0, 1.5, "cold")
    assert fused[0].kernel == "corr_tile+sum" and fused[0].time_us == 30.0
    lost = kernel_rows(case, "two_kernel_lean", {}, 4300.0, 1.5, "warm")
    assert all(math.isnan(r.time_us) and not r.within and "not in the profile" in r.note
               for r in lost)
    lines = summary_lines(rows + tiny)
    assert any("corr_tile" in ln and "1/2 shapes" in ln and "worst 3.93" in ln for ln in lines)


def test_bad_arguments_and_no_gpu_are_one_line(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--variants", "side_stream,graph"])
    assert "--variants: 'graph' is not one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--reps", "2"])
    assert "--reps must be >= 5" in capsys.readouterr().err
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the study would run")
    assert main(["study", "kernels", "--filter", "M == 1"]) == 2
    assert capsys.readouterr().err.strip() == \
           "harness study kernels: needs a CUDA GPU (none is visible)"


def test_stream_rows_are_named_by_the_accumulation_that_ran():
    """stream accumulates with corr_tile at M > 16 with >= 32 groups per row (K8192-g128):
    its second row is then corr_tile's; with neither in the profile, the row says so."""
    case = GemmCase(1024, 2048, 8192, 128)
    rows = kernel_rows(case, "stream", {"asum_flat": (5.0, 9), "corr_tile": (21.0, 9)},
                       4300.0, 0.54, "warm")
    assert [r.kernel for r in rows] == ["asum_flat", "corr_tile"]
    assert rows[1].time_us == 21.0 and rows[1].samples == 9
    empty = kernel_rows(case, "stream", {"asum_flat": (5.0, 9)}, 4300.0, 0.54, "warm")
    assert empty[1].kernel == "corr_stream" and math.isnan(empty[1].time_us)
    assert "not in the profile" in empty[1].note


WIDE = ("void harness_int4::corr_detail::(anonymous namespace)::corr_wide_kernel<4, false>"
        "(__half*, float const*, float const*, int, int, int, int)")
DECODE = ("void harness_int4::corr_detail::(anonymous namespace)::corr_decode_kernel<1, false>"
          "(__half*, __half const*, float const*, int, int, int, int, int, int)")


def test_wide_rows_follow_the_kernels_that_ran():
    """wide at M <= 4 launches corr_decode alone (it sums A itself: its bytes include A),
    so its a_sum stage has no row there; above, asum_flat and the accumulation that ran.
    The accumulation missing from a profile is still a NaN row saying so."""
    assert [kernel_class(n) for n in (WIDE, DECODE)] == ["corr_wide", "corr_decode"]
    case = GemmCase(1, 8192, 2048, 128)
    rows = kernel_rows(case, "wide", {"corr_decode": (1.2, 9)}, 4300.0, 0.54, "warm")
    assert [r.kernel for r in rows] == ["corr_decode"]
    assert rows[0].bytes == kernel_bytes("corr_tile+sum", 1, 8192, 2048, 128)
    big = GemmCase(1024, 8192, 2048, 128)
    rows = kernel_rows(big, "wide", {"asum_flat": (4.0, 9), "corr_wide": (9.0, 9)},
                       4300.0, 0.54, "warm")
    assert [(r.kernel, r.time_us) for r in rows] == [("asum_flat", 4.0), ("corr_wide", 9.0)]
    lost = kernel_rows(big, "wide", {"asum_flat": (4.0, 9)}, 4300.0, 0.54, "warm")
    assert [r.kernel for r in lost] == ["asum_flat", "corr_wide"]
    assert math.isnan(lost[1].time_us) and "not in the profile" in lost[1].note


def test_every_stage_names_kernels_with_a_byte_model():
    """Each alternative of each variant's stages has a byte count (the study sizes its
    copies from them before profiling: a stage spelled "asum_flat?" once broke that)."""
    for variant, specs in VARIANT_KERNELS.items():
        for spec in specs:
            for k in stage_options(spec):
                assert kernel_bytes(k, 4, 256, 1024, 128) > 0, (variant, k)


def test_the_copy_floor_recognises_torchs_device_copy():
    """The H200's trace names torch's same-dtype copy "Memcpy DtoD (Device -> Device)": a
    match on "copy" alone missed it and left every copy_us NaN (study of 394e076)."""
    assert is_copy_activity("Memcpy DtoD (Device -> Device)")
    assert is_copy_activity("void at::native::direct_copy_kernel_cuda(...)")
    assert not is_copy_activity(TILE) and not is_copy_activity(FLUSH)
