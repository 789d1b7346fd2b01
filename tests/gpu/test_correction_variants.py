"""GPU tests of the correction variants of ``marlin_asym`` (marker ``gpu``; each test skips
with its reason when there is no GPU, no build or no quanto Marlin).

Every variant, on the parity chain's shapes, against exact arithmetic: the output minus
(Marlin's own output + a_sum64 @ delta64) within 2 fp16 ULPs of the operands' scale, every
element written (NaN-poisoned outputs), the accuracy gate vs the fp64 reference; the tiled
kernels bit for bit equal to each other; planted defects (paths built with correction
flags, the planted -delta and twice-applied correction paths) caught under every variant;
Marlin's rc passed through; the graph cache, the grow-only scratch, graph capture of every
variant, the environment switch and ``auto``; one smoke run of the study.
"""

from __future__ import annotations

import csv

import pytest
import torch
from planted.paths import CorrectionTwicePath, WrongSignDeltaPath

import harness.cases.matrices  # noqa: F401  (registers the matrices)
from harness.cases.data import case_data, quantize_asymmetric
from harness.cases.registry import MATRICES
from harness.kernels.marlin import variants as cv
from harness.kernels.marlin.asym import MarlinAsymPath, marlin_mm_asymmetric, new_workspace
from harness.kernels.marlin.pack import marlin_pack_asymmetric
from harness.kernels.reference import a_group_sum, apply_marlin_correction, reference_fp64
from harness.measure.accuracy import accuracy_stats
from harness.studies.correction_study import correction_ulps

pytestmark = pytest.mark.gpu

PARITY = MATRICES.cases("parity")
EXT_CORRECTIONS = [v for v in cv.CORRECTIONS if v != "two_kernel"]
TILED = ("side_stream", "fused", "fused_pdl")
#: Variants whose correction runs alone (``correction_variant``) and takes the planted flags.
ALONE = ("two_kernel_lean", "side_stream", "fused", "fused_pdl", "stream", "wide", "gsplit",
         "blocked", "fold")
#: The variants with asum_flat's group sums and their own accumulations.
FLAT = ("stream", "wide", "gsplit", "blocked", "fold")


def _cases(tag):
    return [c for c in PARITY if tag in c.tags]


def _poison(M, N, device):
    return torch.full((M, N), float("nan"), dtype=torch.float16, device=device)


def _corr(A, prepared):
    pack = prepared.state["pack"]
    return a_group_sum(A, pack.group_size) @ pack.delta.double()


@pytest.fixture(scope="module")
def mm(marlin_ext, cuda_device):
    out = {}
    for case in _cases("mm_asym"):
        data = case_data(case)
        A, w = data.A.to(cuda_device), data.weight.to(cuda_device)
        prepared = MarlinAsymPath(variant="two_kernel").prepare(w, cuda_device)
        out[case.id] = (case, A, w, prepared, reference_fp64(A, w))
    return out


def _run(variant, prepared, A, device, path=None):
    out = _poison(A.shape[0], prepared.N, device)
    path = path or MarlinAsymPath(variant=variant)
    if variant == "marlin_only":
        path.run_marlin_only(prepared, A, out)
    else:
        path.run_variant(prepared, A, out, variant)
    torch.cuda.synchronize()
    return out


def _marlin_only(prepared, A, device):
    return _run("marlin_only", prepared, A, device)


def test_extension_variant_table_matches_python(marlin_ext, cuda_device):
    cv.check_extension_names(marlin_ext.correction_variant_names())
    major, _ = torch.cuda.get_device_capability(cuda_device)
    assert marlin_ext.pdl_supported(cuda_device.index) == (major >= 9)


def test_pdl_launches_are_not_refused(ext, cuda_device):
    before = ext.pdl_fallbacks()
    for stream in (torch.cuda.current_stream(cuda_device), torch.cuda.Stream(cuda_device)):
        with torch.cuda.stream(stream):
            ext.launch_empty(cuda_device.index, True)
            A = torch.randn(4, 1024, device=cuda_device).half()
            C = torch.zeros(4, 256, dtype=torch.float16, device=cuda_device)
            ext.correction_variant(A, C, torch.ones(8, 256, device=cuda_device),
                                   cv.ext_id("fused_pdl"))
    torch.cuda.synchronize()
    assert ext.pdl_fallbacks() == before, (
        "the driver refused the PDL attribute (relaunched plainly)")


def test_lean_marlin_only_equals_the_provider_call(mm, marlin_ext, cuda_device):
    case, A, _, prepared, _ = next(iter(mm.values()))
    lean = _marlin_only(prepared, A, cuda_device)
    C = _poison(case.M, case.N, cuda_device)
    pack = prepared.state["pack"]
    rc = marlin_ext.marlin_gemm(A, pack.B, C, pack.scales, pack.sz, prepared.state["workspace"],
                                pack.marlin_groupsize)
    torch.cuda.synchronize()
    assert rc == 0 and torch.equal(lean, C)


@pytest.mark.parametrize("variant", cv.CORRECTIONS)
@pytest.mark.parametrize("case_id", [c.id for c in _cases("mm_asym")])
def test_variant_within_2_ulp_of_exact_correction(variant, case_id, mm, cuda_device, gates):
    case, A, _, prepared, ref = mm[case_id]
    marlin = _marlin_only(prepared, A, cuda_device)
    out = _run(variant, prepared, A, cuda_device)
    assert bool(torch.isfinite(out).all()), "unwritten or NaN elements"
    ulps = correction_ulps(out, marlin, _corr(A, prepared))
    assert float(ulps.max()) <= 2.0, (variant, float(ulps.max()))
    again = _run(variant, prepared, A, cuda_device)
    assert torch.equal(out, again), "not bitwise repeatable"
    gates[1](accuracy_stats(out, ref), "marlin_asym", case)   # may xfail: Marlin's own error


@pytest.mark.parametrize("variant", ALONE)
@pytest.mark.parametrize("case", _cases("corr_kernel"), ids=lambda c: c.id)
def test_correction_alone_matches_python(variant, case, ext, cuda_device, corr_inputs):
    A, C0, pack = corr_inputs(case, cuda_device)
    C = C0.clone()
    ext.correction_variant(A, C, pack.delta, cv.ext_id(variant))
    torch.cuda.synchronize()
    ref = apply_marlin_correction(C0, A, pack.delta, pack.group_size)
    assert float(correction_ulps(C, C0, ref - C0.double()).max()) <= 2.0


@pytest.mark.parametrize("M", [1, 2, 3, 8, 13, 16, 40, 100, 300])
@pytest.mark.parametrize("gs,K", [(128, 2048), (2048, 2048), (128, 8192)])
def test_tiled_kernels_agree_bit_for_bit(M, gs, K, ext, cuda_device):
    """Same bits from all three; K8192 g128 at M > 16 needs > 48 KB of shared memory."""
    gen = torch.Generator(device=cuda_device).manual_seed(M * 7 + gs + K)
    N = 8192 if M == 100 else 1024                   # M100 N8192: several column tiles per block
    w = quantize_asymmetric(torch.randn(K, N, device=cuda_device, generator=gen) * 0.02, gs)
    pack = marlin_pack_asymmetric(w)
    A = torch.randn(M, K, device=cuda_device, generator=gen).half()
    C0 = torch.randn(M, N, device=cuda_device, generator=gen).half()
    outs = {}
    for v in TILED:
        C = C0.clone()
        ext.correction_variant(A, C, pack.delta, cv.ext_id(v))
        outs[v] = C
    torch.cuda.synchronize()
    assert torch.equal(outs["fused"], outs["side_stream"])
    assert torch.equal(outs["fused"], outs["fused_pdl"])
    ref = apply_marlin_correction(C0, A, pack.delta, pack.group_size)
    assert float(correction_ulps(outs["fused"], C0, ref - C0.double()).max()) <= 2.0


@pytest.mark.parametrize("variant", FLAT)
@pytest.mark.parametrize("M", [1, 2, 3, 4, 8, 13, 16, 40, 64, 100, 128, 300])
@pytest.mark.parametrize("gs,K", [(128, 2048), (2048, 2048), (128, 8192), (8192, 8192),
                                  (64, 1024), (4096, 8192), (1024, 6144), (256, 2048),
                                  (8, 1024), (32, 8192)])
def test_stream_kernels_within_2_ulp_and_repeatable(variant, M, gs, K, ext, cuda_device):
    """stream's kernels over every branch of their launch: small groups (vpg 8, 16: one
    and four passes), large groups (vpg 256: a warp per group; 512, 1024: a block per
    group), the decode kernel (M = 1 at every G; M <= 16 at G = 1), corr_tile where
    ``stream_takes_tile`` routes it (G > 1 at 2 <= M <= 256, G >= 32 above) and
    corr_stream's RM 1, 2 and 4 (M < 64, < 128, >= 128; G = 1, and G < 32 at M = 300),
    several column blocks; same bits twice. wide's: corr_wide_kernel where ``wide_takes``
    (2 <= G < 32 at M >= 2, and G >= 32 at M > 256: one to four chunks of 32 groups at
    M = 300, G = 32, 64, 128) with RM 1, 2, 4 (by M and N), G = 6 (a chunk not a
    multiple of 4), rows past M inside a block, N = 1024 and 8192; its decode kernel at
    M <= 4 (G <= 128, M * K / 8 <= 1024 vectors: one, two and four vectors per thread,
    group sums by shuffles within a warp at vpg 1..32 and over warps at vpg 128..1024);
    stream's kernels elsewhere. gsplit's corr_gsplit_kernel at G >= 2, M <= 256: row slots
    1, 2, 4 and 8 (by M and G), one row per thread and, where the grid stays large, two
    (M = 128, N = 1024, G = 64) and four (M = 100, N = 8192: the last block partly past M),
    one and two batches of 4 groups per thread (G = 64 at M = 2: 4 groups; G = 256 at
    K = 8192, g32: 8), 1 to 16 threads per C octet (by the block's rows); stream's decode
    kernel at M = 1 and wide's kernels at M = 300. blocked's corr_blocked_kernel at G >= 2,
    M >= 17: rows per thread 1 (M = 40, 64, 128 at N = 1024), 2 (M = 100, N = 8192) and 4
    (M = 300), the last block partly past M, one to eight chunks of 32 groups and a chunk of
    G % 4 groups (G = 6); gsplit's kernels below M = 17 and at G = 1. fold's
    corr_fold_kernel at G = 1, M >= 17 (one and four vectors of A per thread per row, one
    and four passes of 2048 columns); blocked's route elsewhere."""
    gen = torch.Generator(device=cuda_device).manual_seed(M * 11 + gs + K)
    N = 8192 if M in (100, 300) else 1024
    # any delta [K / gs, N] will do (the kernels never branch on values); a Marlin pack
    # exists only for some of these group sizes
    delta = torch.randn(K // gs, N, device=cuda_device, generator=gen) * 2e-3
    A = torch.randn(M, K, device=cuda_device, generator=gen).half()
    C0 = torch.randn(M, N, device=cuda_device, generator=gen).half()
    outs = []
    for _ in range(2):
        C = C0.clone()
        ext.correction_variant(A, C, delta, cv.ext_id(variant))
        outs.append(C)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1]), "not bitwise repeatable"
    ref = apply_marlin_correction(C0, A, delta, gs)
    assert float(correction_ulps(outs[0], C0, ref - C0.double()).max()) <= 2.0


@pytest.mark.parametrize("M", [300, 1000, 1024])
@pytest.mark.parametrize("N", [1024, 2176, 8192])
def test_wide_and_stream_agree_bit_for_bit_where_both_sum_in_order(M, N, ext, cuda_device):
    """At M > 256 with G = 16 stream accumulates with corr_stream_kernel and wide with
    corr_wide_kernel: both add the groups in order g = 0 .. G - 1 in fp32 from the same
    a_sum, so their outputs are the same bits (N = 2176: a last block of 128 columns, whose
    lanes have no second quad; N = 8192 at M = 1000 and 1024: 4 rows per warp, the last
    block of M = 1000 partly past M)."""
    gen = torch.Generator(device=cuda_device).manual_seed(M + N)
    K, gs = 2048, 128
    delta = torch.randn(K // gs, N, device=cuda_device, generator=gen) * 2e-3
    A = torch.randn(M, K, device=cuda_device, generator=gen).half()
    C0 = torch.randn(M, N, device=cuda_device, generator=gen).half()
    outs = {}
    for v in FLAT:
        C = C0.clone()
        ext.correction_variant(A, C, delta, cv.ext_id(v))
        outs[v] = C
    torch.cuda.synchronize()
    assert torch.equal(outs["stream"], outs["wide"])
    assert torch.equal(outs["gsplit"], outs["wide"])          # gsplit runs wide's above 256
    assert torch.equal(outs["blocked"], outs["wide"])         # the same order of the same sums
    assert torch.equal(outs["fold"], outs["blocked"])         # fold is blocked at G > 1
    ref = apply_marlin_correction(C0, A, delta, gs)
    assert float(correction_ulps(outs["wide"], C0, ref - C0.double()).max()) <= 2.0


@pytest.mark.parametrize("M", [17, 40, 64, 128, 256])
@pytest.mark.parametrize("N", [1024, 2176, 8192])
def test_blocked_and_wide_agree_bit_for_bit_at_mid_m(M, N, ext, cuda_device):
    """At 17 <= M <= 256 with G = 16 wide runs corr_wide_kernel and blocked
    corr_blocked_kernel (rows per thread 1, 2 or 4 by M and N; N = 2176: a last block of
    128 columns whose threads have no second quad): both add the groups in order in fp32
    from zero and then once to C, so the bits are the same; below M = 17 blocked is
    gsplit, bit for bit."""
    gen = torch.Generator(device=cuda_device).manual_seed(M * 7 + N)
    K, gs = 2048, 128
    delta = torch.randn(K // gs, N, device=cuda_device, generator=gen) * 2e-3
    outs = {}
    for rows in (M, 16):
        A = torch.randn(rows, K, device=cuda_device, generator=gen).half()
        C0 = torch.randn(rows, N, device=cuda_device, generator=gen).half()
        for v in ("wide", "gsplit", "blocked"):
            C = C0.clone()
            ext.correction_variant(A, C, delta, cv.ext_id(v))
            outs[rows, v] = C
    torch.cuda.synchronize()
    assert torch.equal(outs[M, "blocked"], outs[M, "wide"])
    assert torch.equal(outs[16, "blocked"], outs[16, "gsplit"])


@pytest.mark.parametrize("M", [17, 40, 301, 1023])
@pytest.mark.parametrize("N,K", [(1024, 2048), (2176, 8192), (8192, 2048)])
def test_fold_kernel_within_2_ulp_repeatable_and_honours_the_skipped_tile(M, N, K, ext,
                                                                         cuda_device):
    """fold at G = 1, M >= 17 is one kernel (corr_fold_kernel) summing its rows of A: 1, 2
    and 4 rows per block (M = 17 and 40, 301, 1023 on a GPU of 132 SMs; the last block of
    301 and 1023 partly past M), one and four vectors of A per thread per row (K = 2048,
    8192), one, two and four passes of 2048 columns (N = 1024; 2176, a second pass of 128
    columns; 8192). Within 2 ULP of the exact correction on a C of unit scale, the same
    bits twice, and under the planted flag bit 1 the last 128 columns left as they were
    while the others get the unplanted run's bits. (Bit 0, fp16 accumulation, is one
    rounded product at G = 1, within the bound: the grouped shapes plant it.)"""
    gen = torch.Generator(device=cuda_device).manual_seed(M * 3 + N + K)
    delta = torch.randn(1, N, device=cuda_device, generator=gen) * 0.05
    A = torch.randn(M, K, device=cuda_device, generator=gen).half()
    C0 = torch.randn(M, N, device=cuda_device, generator=gen).half()
    outs = []
    for flags in (0, 0, 2):
        C = C0.clone()
        ext.correction_variant(A, C, delta, cv.ext_id("fold"), flags)
        outs.append(C)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1]), "not bitwise repeatable"
    ref = apply_marlin_correction(C0, A, delta, K)
    assert float(correction_ulps(outs[0], C0, ref - C0.double()).max()) <= 2.0
    n_end = (N - 1) // 128 * 128
    assert torch.equal(outs[2][:, n_end:], C0[:, n_end:])
    assert torch.equal(outs[2][:, :n_end], outs[0][:, :n_end])


def test_wide_decode_kernel_replays_in_a_cuda_graph(ext, cuda_device):
    """At M <= 4 wide is one kernel on the caller's stream (no side stream, no scratch):
    captured into a graph and replayed on fresh C, it gives the eager call's bits."""
    gen = torch.Generator(device=cuda_device).manual_seed(5)
    K, gs, N = 2048, 128, 2048
    delta = torch.randn(K // gs, N, device=cuda_device, generator=gen) * 2e-3
    A = torch.randn(1, K, device=cuda_device, generator=gen).half()
    C0 = torch.randn(1, N, device=cuda_device, generator=gen).half()
    eager = C0.clone()
    ext.correction_variant(A, eager, delta, cv.ext_id("wide"))
    C = C0.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ext.correction_variant(A, C, delta, cv.ext_id("wide"))
    C.copy_(C0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(C, eager)


@pytest.mark.parametrize("variant", FLAT)
@pytest.mark.parametrize("flags", [1, 2], ids=["fp16_accum", "skip_last_tile"])
@pytest.mark.parametrize("M", [1, 8, 64, 300])
def test_stream_decode_kernel_catches_the_planted_flags(variant, M, flags, ext, cuda_device):
    """stream's accumulation at decode honours both planted flags: fp16 accumulation
    (G = 32 products of |a_sum| ~ 11 x |delta| ~ 0.05, C = 0, so the error is the
    correction's own) and the last 128 columns left alone. M = 1 runs the decode split
    kernel (G over the idle row slots); M = 8 with G = 32 is routed to corr_tile
    (``stream_takes_tile``), which must honour them too; wide runs its decode kernel at
    M = 1, stream's route at M = 8 and 64 (32 groups) and corr_wide_kernel at M = 300. The
    unplanted run adds to a C of unit scale, as after Marlin: on a
    zero C, an output that cancels to near zero makes the fp32 sum's own rounding several
    fp16 ULPs of itself (seen at M = 64 with corr_wide's in-order sum: 4.8 ULP)."""
    gen = torch.Generator(device=cuda_device).manual_seed(M + 10 * flags)
    K, gs, N = 4096, 128, 1024
    delta = torch.randn(K // gs, N, device=cuda_device, generator=gen) * 0.05
    A = torch.randn(M, K, device=cuda_device, generator=gen).half()
    C0 = torch.zeros(M, N, device=cuda_device).half()
    corr = apply_marlin_correction(C0, A, delta, gs) - C0.double()
    C = C0.clone()
    ext.correction_variant(A, C, delta, cv.ext_id(variant), flags)
    torch.cuda.synchronize()
    assert float(correction_ulps(C, C0, corr).max()) > 2.0
    C1 = torch.randn(M, N, device=cuda_device, generator=gen).half()
    C = C1.clone()
    ext.correction_variant(A, C, delta, cv.ext_id(variant), 0)
    torch.cuda.synchronize()
    corr1 = apply_marlin_correction(C1, A, delta, gs) - C1.double()
    assert float(correction_ulps(C, C1, corr1).max()) <= 2.0


@pytest.mark.parametrize("variant", FLAT)
def test_stream_refuses_a_group_it_cannot_cut(variant, ext, cuda_device):
    """A group of 384 (48 vectors: neither a divisor of 32 nor a multiple) is refused in
    one line naming what the kernels need, before anything is launched (wide shares
    stream's group sums)."""
    A = torch.randn(4, 1536, device=cuda_device).half()
    C = torch.zeros(4, 1024, device=cuda_device).half()
    delta = torch.zeros(4, 1024, device=cuda_device)
    with pytest.raises(RuntimeError, match="stream correction needs a group size"):
        ext.correction_variant(A, C, delta, cv.ext_id(variant))


@pytest.mark.parametrize("flags", [1, 2], ids=["fp16_accum", "skip_last_tile"])
@pytest.mark.parametrize("variant", ALONE)
def test_planted_flags_are_caught_under_every_variant(variant, flags, ext, cuda_device,
                                                      corr_inputs):
    case = _cases("corr_kernel")[3]                          # M31 N1024 K4096 g128
    A, C0, pack = corr_inputs(case, cuda_device)
    corr = apply_marlin_correction(C0, A, pack.delta, pack.group_size) - C0.double()
    C = C0.clone()
    ext.correction_variant(A, C, pack.delta, cv.ext_id(variant), flags)
    assert float(correction_ulps(C, C0, corr).max()) > 2.0
    C = C0.clone()
    ext.correction_variant(A, C, pack.delta, cv.ext_id(variant), 0)
    assert float(correction_ulps(C, C0, corr).max()) <= 2.0


@pytest.mark.parametrize("variant", EXT_CORRECTIONS)
def test_planted_defects_fail_under_every_variant(variant, mm, cuda_device):
    case, A, w, prepared, ref = mm[[c.id for c in _cases("mm_asym")][-1]]
    marlin = _marlin_only(prepared, A, cuda_device)
    corr = _corr(A, prepared)
    fp16_accum = MarlinAsymPath(variant=variant, correction_flags=1)     # flag bit 0, planted
    out = _run(variant, prepared, A, cuda_device, fp16_accum)
    assert float(correction_ulps(out, marlin, corr).max()) > 2.0
    for planted in (WrongSignDeltaPath(variant=variant), CorrectionTwicePath(variant=variant)):
        out = _run(variant, planted.prepare(w, cuda_device), A, cuda_device, planted)
        acc = accuracy_stats(out, ref)
        assert acc.nonfinite == 0 and not acc.passes(1e-3), (type(planted).__name__, acc)


@pytest.mark.parametrize("variant", EXT_CORRECTIONS)
def test_marlin_rc_is_returned_and_the_correction_skipped(variant, mm, cuda_device):
    case, A, w, prepared, _ = next(v for v in mm.values() if v[0].per_row)
    C = _poison(case.M, case.N, cuda_device)
    rc = marlin_mm_asymmetric(A, prepared.state["pack"], C, prepared.state["workspace"],
                              groupsize=case.K, variant=variant)   # the untranslated per-row size
    assert rc == 2


def test_graph_variant_caches_one_graph_per_buffer_set(mm, marlin_ext, cuda_device):
    case, A, _, prepared, _ = next(iter(mm.values()))
    marlin_ext.graph_cache_clear()
    assert marlin_ext.graph_cache_size() == 0
    out = _poison(case.M, case.N, cuda_device)
    path = MarlinAsymPath(variant="graph")
    expect = _run("two_kernel_lean", prepared, A, cuda_device)
    for _ in range(3):
        out.fill_(float("nan"))
        path.run_variant(prepared, A, out, "graph")
        torch.cuda.synchronize()
        assert torch.equal(out, expect)               # a replay, not a stale result
    assert marlin_ext.graph_cache_size() == 1
    other = _poison(case.M, case.N, cuda_device)
    path.run_variant(prepared, A, other, "graph")
    assert marlin_ext.graph_cache_size() == 2
    marlin_ext.graph_cache_clear()
    assert marlin_ext.graph_cache_size() == 0


@pytest.mark.parametrize("variant", ["marlin_only"] + list(cv.CORRECTIONS) + list(cv.FLOORS))
def test_every_variant_captures_into_a_cuda_graph(variant, mm, marlin_ext, cuda_device):
    case, A, _, prepared, _ = mm[[c.id for c in _cases("mm_asym")][-1]]
    expect = _run(variant, prepared, A, cuda_device)
    out = _poison(case.M, case.N, cuda_device)
    path = MarlinAsymPath()

    def call():
        if variant == "marlin_only":
            path.run_marlin_only(prepared, A, out)
        else:
            path.run_variant(prepared, A, out, variant)

    call()                                             # outside the capture first
    torch.cuda.synchronize()
    cached = marlin_ext.graph_cache_size()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    assert marlin_ext.graph_cache_size() == cached     # inside a capture: no nested graph
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expect)


def test_unsupported_problem_says_why(ext, cuda_device):
    A = torch.randn(1, 256, device=cuda_device).half()
    C = torch.zeros(1, 100, dtype=torch.float16, device=cuda_device)
    delta = torch.ones(2, 100, device=cuda_device)
    with pytest.raises(RuntimeError, match="N % 8"):
        ext.correction_variant(A, C, delta, cv.ext_id("fused"))
    ext.correction_variant(A, C, delta, cv.ext_id("two_kernel_lean"))   # the seed's kernels run it
    torch.cuda.synchronize()
    assert torch.allclose(C.float(), A.float().sum(1, keepdim=True).expand(1, 100),
                          rtol=2e-3, atol=2e-3)


def test_variant_scratch_grows_and_keeps_old_buffers(ext, cuda_device):
    dev = cuda_device.index
    ext.variant_scratch_free(dev)
    assert ext.variant_scratch_state(dev) == (0, 0, 0, 0)
    for M, grows in ((1, 1), (1, 1), (600, 2)):
        A = torch.randn(M, 8192, device=cuda_device).half()
        C = torch.zeros(M, 256, dtype=torch.float16, device=cuda_device)
        ext.correction_variant(A, C, torch.ones(64, 256, device=cuda_device),
                               cv.ext_id("side_stream"))
        ptr, cap, n, retired = ext.variant_scratch_state(dev)
        assert n == grows and retired == grows - 1 and cap >= M * 64 * 4
    torch.cuda.synchronize()
    ext.variant_scratch_free(dev)
    assert ext.variant_scratch_state(dev) == (0, 0, 0, 0)


def test_environment_and_auto_select_the_variant(mm, marlin_ext, cuda_device, monkeypatch):
    by_m = {v[0].M: v for v in mm.values()}
    case16, A16, w16, _, _ = by_m[16]
    case64, A64, w64, _, _ = by_m[64]
    marlin_ext.graph_cache_clear()
    monkeypatch.setenv(cv.VARIANT_ENV, "graph")
    p16 = MarlinAsymPath().prepare(w16, cuda_device)
    assert p16.state["variant"] == "graph"
    MarlinAsymPath().run(p16, A16, _poison(case16.M, case16.N, cuda_device))
    assert marlin_ext.graph_cache_size() == 1
    monkeypatch.setattr(cv, "AUTO_BY_CLASS", {"decode": "graph", "mid": "fused", "large": "fused"})
    monkeypatch.setenv(cv.VARIANT_ENV, "auto")
    a16 = MarlinAsymPath().prepare(w16, cuda_device)
    a64 = MarlinAsymPath().prepare(w64, cuda_device)
    assert a16.state["variant"] == a64.state["variant"] == "auto"
    out = MarlinAsymPath().run(a64, A64, _poison(case64.M, case64.N, cuda_device))
    torch.cuda.synchronize()
    assert marlin_ext.graph_cache_size() == 1          # mid -> fused: no graph
    assert bool(torch.isfinite(out).all())
    MarlinAsymPath().run(a16, A16, _poison(case16.M, case16.N, cuda_device))
    assert marlin_ext.graph_cache_size() == 2          # decode -> graph
    marlin_ext.graph_cache_clear()


def test_workspace_helper_still_matches_marlin(cuda_device):
    assert new_workspace(2048, cuda_device).numel() == 2048 // 128 * 16


def test_study_smoke_run(marlin_ext, gpu_out_dir):
    from harness.studies import correction_study

    out = gpu_out_dir / "correction_study_smoke"
    rc = correction_study.main(["--out", str(out), "--quick", "--no-sanity", "--filter",
                                "M == 1 and N == 2048 and K == 2048 and group_size == 128"])
    assert rc == 0
    with open(out / "correction_study.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(cv.STUDIED) * 2
    assert {r["variant"] for r in rows} == set(cv.STUDIED)
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["time_us"]) > 0
    assert "Recommendation" in (out / "correction_study.md").read_text()
