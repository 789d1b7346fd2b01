"""The seed's parity chain on a GPU (marker ``gpu``; each test skips with its reason).

1. Symmetric packer: quanto's Marlin (sz = -8 s) on symmetric weights vs the fp64
   reference, and one-hot activations that read the kernel's dequantized weights back
   EXACTLY (the provider's declared formula, checked against the kernel bit for bit).
2. Python correction reference == A @ W_asym: CPU, in tests/unit/test_reference.py
   (test_correction_identity_*, test_emulate_marlin_equals_reference_on_parity); not
   duplicated here.
3. CUDA correction kernels vs the Python reference, within 2 fp16 ULPs; the scratch
   buffer's doubling; each planted CUDA defect (flags) is caught.
4. ``marlin_mm_asymmetric`` on every parity case tagged mm_asym (up to M=64 N=2048
   K=8192, 64 groups) under the accuracy gate, with the negative controls that must fail
   it: Marlin without the correction, delta with the wrong sign, the correction twice,
   and per-row without the -1 translation (must fall back via rc 2, not pass).
5. End-to-end model parity: a slot, skipped until the perplexity issue lands.
Every accuracy run writes into a NaN-poisoned output.
"""

from __future__ import annotations

import pytest
import torch
from planted.paths import CorrectionTwicePath, WrongSignDeltaPath

import harness.cases.matrices  # noqa: F401  (registers the matrices)
from harness.cases.data import QuantizedWeight, case_data
from harness.cases.registry import MATRICES
from harness.kernels.dispatch import DispatchSettings
from harness.kernels.marlin.asym import marlin_mm_asymmetric
from harness.kernels.marlin.pack import marlin_groupsize, marlin_pack_asymmetric
from harness.kernels.marlin.providers import PROVIDERS, workspace_entries
from harness.kernels.quant_gemm import QuantGemm
from harness.kernels.reference import a_group_sum, apply_marlin_correction, reference_fp64
from harness.kernels.registry_load import load_all
from harness.measure.accuracy import accuracy_stats, ulp_size

pytestmark = pytest.mark.gpu

GATE = 1e-3
PARITY = MATRICES.cases("parity")


def _poison(M, N, device, dtype=torch.float16):
    return torch.full((M, N), float("nan"), dtype=dtype, device=device)


def _cases(tag):
    return [c for c in PARITY if tag in c.tags]


def _ws(N, device):
    return torch.zeros(workspace_entries(N), dtype=torch.int32, device=device)


# ------------------------------------------------------------------ 1. symmetric packer
@pytest.mark.parametrize("case", _cases("pack_sym"), ids=lambda c: c.id)
def test_symmetric_packer_marlin_vs_fp64(case, marlin_ext, cuda_device):
    data = case_data(case, symmetric=True)
    w = data.weight.to(cuda_device)
    formula = PROVIDERS["quanto"].formula(marlin_groupsize(w.group_size, w.K))
    pack = marlin_pack_asymmetric(w, formula=formula)
    A = data.A.to(cuda_device)
    C = _poison(case.M, case.N, cuda_device)
    rc = PROVIDERS["quanto"].gemm(A, pack, C, _ws(case.N, cuda_device), pack.marlin_groupsize)
    assert rc == 0
    torch.cuda.synchronize()
    if pack.marlin_groupsize == -1:
        # per-column: the kernel computes q * s (no -8), so symmetric Marlin alone equals
        # A @ (q * s), and the symmetric weight needs delta = zero = -8 s
        implied = QuantizedWeight(w.q, w.scale, torch.zeros_like(w.zero), w.group_size)
        assert accuracy_stats(C, reference_fp64(A, implied)).passes(GATE)
        assert not accuracy_stats(C, reference_fp64(A, w)).passes(GATE)
    else:
        acc = accuracy_stats(C, reference_fp64(A, w))
        assert acc.passes(GATE), acc


def _one_hot_readback(ext, pack, sz, K, N, device):
    """Read W_kernel[K, N] back through the kernel with 16-row identity slices of A."""
    out = torch.empty(K, N, dtype=torch.float16, device=device)
    ws = _ws(N, device)
    for k0 in range(0, K, 16):
        A = torch.zeros(16, K, dtype=torch.float16, device=device)
        A[torch.arange(16), k0 + torch.arange(16)] = 1.0
        C = _poison(16, N, device)
        rc = ext.marlin_gemm(A, pack.B, C, pack.scales, sz, ws, pack.marlin_groupsize)
        assert rc == 0
        out[k0:k0 + 16] = C
    return out


def test_one_hot_grouped_reads_q_minus_8_times_s_exactly(marlin_ext, cuda_device):
    case = _cases("pack_sym")[0]                       # g128
    w = case_data(case).weight.to(cuda_device)         # asymmetric codes: all 16 values occur
    prov = PROVIDERS["quanto"]
    assert prov.formula(128) == "q_minus_8"
    pack = marlin_pack_asymmetric(w, formula=prov.formula(128))
    got = _one_hot_readback(marlin_ext, pack, pack.sz, w.K, w.N, cuda_device)
    s = w.expand(w.scale.float())
    expected = ((w.q.float() - 8.0) * s).half()        # one rounding of an exact fp32 product
    assert torch.equal(got, expected), (got != expected).sum().item()
    assert not torch.equal(got, (w.q.float() * s).half())


def test_one_hot_per_column_reads_q_times_s_and_ignores_sz(marlin_ext, cuda_device):
    case = next(c for c in _cases("pack_sym") if c.per_row)
    w = case_data(case).weight.to(cuda_device)
    prov = PROVIDERS["quanto"]
    assert prov.formula(-1) == "q_times_s"
    pack = marlin_pack_asymmetric(w, formula=prov.formula(-1))
    nan_sz = torch.full_like(pack.scales, float("nan"))  # would poison any output that used it
    got = _one_hot_readback(marlin_ext, pack, nan_sz, w.K, w.N, cuda_device)
    # Exact statement: the accumulator holds the code q exactly, is rounded to fp16 (exact)
    # and multiplied by s in fp16 at the end: fp16(q * s), one rounding, no -8, sz unused.
    expected = (w.q.float() * w.scale.float()).half()
    assert torch.equal(got, expected), (got != expected).sum().item()


# ------------------------------------------------------------------ 3. correction kernels
def _sum_ulps(C, ref, C0):
    """|C - ref| in fp16 ULPs of the sum's operand scale, max(|ref|, |C0|, |ref - C0|).

    C = C0 + correction is one fp32 sum rounded to fp16; where the two operands cancel,
    |ref| is tiny and an fp32-exact kernel still differs by ~1e-7 absolute (measured in a
    CPU model: up to 9 ULPs of |ref| at the M100 K8192 case). The operands' scale is the
    scale a floating-point sum's error is bounded by.
    """
    C, ref, C0 = (t.detach().double().cpu() for t in (C, ref, C0))
    scale = torch.maximum(torch.maximum(ref.abs(), C0.abs()), (ref - C0).abs())
    return (C - ref).abs().numpy() / ulp_size(scale.numpy(), "float16")


@pytest.mark.parametrize("case", _cases("corr_kernel"), ids=lambda c: c.id)
def test_correction_kernels_match_python_within_2_ulp(case, ext, cuda_device, corr_inputs):
    A, C0, pack = corr_inputs(case, cuda_device)
    a_sum = ext.a_group_sum(A, pack.groups)
    ref_sum = a_group_sum(A, pack.group_size)
    assert torch.allclose(a_sum.double(), ref_sum, rtol=1e-5,
                          atol=1e-4 * ref_sum.abs().max().item())
    C = C0.clone()
    ext.apply_correction(A, C, pack.delta)
    ref = apply_marlin_correction(C0, A, pack.delta, pack.group_size)
    ulps = _sum_ulps(C, ref, C0)
    assert ulps.max() <= 2.0, float(ulps.max())
    # plain ULPs of |ref|, all but cancellations
    assert accuracy_stats(C, ref).p99_ulp <= 1.0
    C2 = C0.clone()
    ext.correction_accum(C2, a_sum, pack.delta)
    assert torch.equal(C2, C)                               # same kernels, same bits


@pytest.mark.parametrize("flags", [1, 2, 4], ids=["fp16_accum", "skip_last_tile", "no_regrow"])
def test_planted_correction_defects_are_caught(flags, ext, cuda_device, corr_inputs):
    case = _cases("corr_kernel")[3]                          # M31 N1024 K4096 g128
    A, C0, pack = corr_inputs(case, cuda_device)
    ref = apply_marlin_correction(C0, A, pack.delta, pack.group_size)
    if flags == 4:
        ext.scratch_free(cuda_device.index)                  # stale (empty) scratch
    C = C0.clone()
    ext.apply_correction(A, C, pack.delta, flags)
    assert _sum_ulps(C, ref, C0).max() > 2.0
    C = C0.clone()
    ext.apply_correction(A, C, pack.delta)                    # flags 0: passes again
    assert _sum_ulps(C, ref, C0).max() <= 2.0


def test_scratch_grows_by_doubling_and_is_reused(ext, cuda_device):
    dev = cuda_device.index
    ext.scratch_free(dev)
    assert ext.scratch_state(dev) == (0, 0, 0)
    A = torch.randn(1, 256, device=cuda_device).half()
    C = torch.zeros(1, 128, dtype=torch.float16, device=cuda_device)
    ext.apply_correction(A, C, torch.ones(2, 128, device=cuda_device))
    ptr1, cap1, n1 = ext.scratch_state(dev)
    assert ptr1 != 0 and cap1 >= 2 * 4 and n1 == 1
    ext.apply_correction(A, C, torch.ones(2, 128, device=cuda_device))
    assert ext.scratch_state(dev) == (ptr1, cap1, 1)          # steady state: no allocation
    big = torch.randn(100, 8192, device=cuda_device).half()
    Cb = torch.zeros(100, 128, dtype=torch.float16, device=cuda_device)
    ext.apply_correction(big, Cb, torch.ones(64, 128, device=cuda_device))
    ptr2, cap2, n2 = ext.scratch_state(dev)
    need = 100 * 64 * 4
    assert n2 == 2 and cap2 >= need and cap2 < 2 * need and cap2 % cap1 == 0
    assert (cap2 // cap1) & (cap2 // cap1 - 1) == 0          # a power-of-two multiple: doubling
    ext.apply_correction(big, Cb, torch.ones(64, 128, device=cuda_device))
    assert ext.scratch_state(dev) == (ptr2, cap2, 2)


# ------------------------------------------------------------------ 4. marlin_mm_asymmetric
@pytest.fixture(scope="module")
def mm_cases(cuda_device):
    out = {}
    for case in _cases("mm_asym"):
        data = case_data(case)
        A = data.A.to(cuda_device)
        w = data.weight.to(cuda_device)
        out[case.id] = (case, A, w, reference_fp64(A, w))
    return out


@pytest.mark.parametrize("case_id", [c.id for c in _cases("mm_asym")])
def test_marlin_mm_asymmetric_passes_the_gate(case_id, mm_cases, marlin_ext, cuda_device, gates):
    case, A, w, ref = mm_cases[case_id]
    path = load_all().get("marlin_asym")
    prepared = path.prepare(w, cuda_device)
    out = _poison(case.M, case.N, cuda_device)
    path.run(prepared, A, out)
    gates[1](accuracy_stats(out, ref), path.name, case)


@pytest.mark.parametrize("control", ["marlin_only", "delta_wrong_sign", "correction_twice"])
@pytest.mark.parametrize("case_id", [c.id for c in _cases("mm_asym")])
def test_negative_controls_fail_the_gate(control, case_id, mm_cases, marlin_ext, cuda_device):
    case, A, w, ref = mm_cases[case_id]
    path = {"marlin_only": load_all().get("marlin_asym"), "delta_wrong_sign": WrongSignDeltaPath(),
            "correction_twice": CorrectionTwicePath()}[control]       # planted: path objects
    prepared = path.prepare(w, cuda_device)
    out = _poison(case.M, case.N, cuda_device)
    if control == "marlin_only":
        path.run_marlin_only(prepared, A, out)
    else:
        path.run(prepared, A, out)
    acc = accuracy_stats(out, ref)
    assert acc.nonfinite == 0                     # the output was written ...
    assert not acc.passes(GATE), acc              # ... and is wrong


@pytest.mark.parametrize("case_id", [c.id for c in _cases("mm_asym") if c.per_row])
def test_per_row_without_translation_falls_back_with_rc_2(case_id, mm_cases, marlin_ext,
                                                          cuda_device, gates):
    case, A, w, ref = mm_cases[case_id]
    pack = marlin_pack_asymmetric(w)
    C = _poison(case.M, case.N, cuda_device)
    rc = marlin_mm_asymmetric(A, pack, C, _ws(case.N, cuda_device), groupsize=case.K)
    assert rc == 2
    settings = DispatchSettings(marlin_enabled=True, allow_sm90=True, translate_per_row=False)
    qg = QuantGemm(w, cuda_device, settings)
    out = _poison(case.M, case.N, cuda_device)
    rec = qg(A, out)
    assert (rec.path, rec.marlin_rc, rec.marlin_groupsize) == ("native_int4", 2, case.K)
    assert "rc=2" in rec.fallback_reason
    assert accuracy_stats(out, ref).passes(GATE)  # the fallback computed it, not Marlin
    fixed = QuantGemm(w, cuda_device, DispatchSettings(marlin_enabled=True, allow_sm90=True))
    out = _poison(case.M, case.N, cuda_device)
    rec = fixed(A, out)
    assert (rec.path, rec.marlin_rc, rec.marlin_groupsize) == ("marlin_asym", 0, -1)
    assert accuracy_stats(out, ref).passes(gates[0]("marlin_asym", case))


# ------------------------------------------------------------------ 5. end to end
# Target 5 (the model scored with dispatch off and on) is tests/gpu/test_model_parity.py.
