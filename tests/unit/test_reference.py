"""CPU reference math: exact GEMM, group sums, the correction identity, Marlin emulation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.cases.data import QuantizedWeight, case_data, quantize_asymmetric
from harness.cases.registry import MATRICES
from harness.kernels.marlin.pack import marlin_pack_asymmetric
from harness.kernels.reference import (
    a_group_sum,
    apply_marlin_correction,
    dequantize_codes,
    emulate_marlin,
    implied_weight,
    reference_fp64,
)


def rel_fro(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref))


def w_sym(weight: QuantizedWeight) -> torch.Tensor:
    return (weight.q.double() - 8) * weight.expand(weight.scale.double())


def delta_fp64(weight: QuantizedWeight) -> torch.Tensor:
    return weight.zero.double() + 8 * weight.scale.double()


# --------------------------------------------------------------------------- by hand
def test_reference_and_group_sum_by_hand():
    q = torch.tensor([[0, 15], [1, 2], [3, 4], [5, 6]], dtype=torch.uint8)
    scale = torch.tensor([[0.5, 1.0], [2.0, 0.25]], dtype=torch.float16)
    zero = torch.tensor([[-1.0, 0.0], [1.0, -2.0]], dtype=torch.float16)
    w = QuantizedWeight(q, scale, zero, group_size=2)
    # W = [[-1, 15], [-0.5, 2], [7, -1], [11, -0.5]]
    A = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float16)
    C = reference_fp64(A, w)
    assert C.dtype == torch.float64
    assert C.tolist() == [[-1 - 1 + 21 + 44, 15 + 4 - 3 - 2]]
    assert a_group_sum(A, 2).tolist() == [[3.0, 7.0]]
    assert a_group_sum(A, 4).tolist() == [[10.0]]


def test_correction_by_hand():
    # one group of 2, delta = [1, -2]: C += (a0 + a1) * delta
    C = torch.tensor([[10.0, 20.0]])
    A = torch.tensor([[1.0, 2.0]])
    out = apply_marlin_correction(C, A, torch.tensor([[1.0, -2.0]]), 2)
    assert out.tolist() == [[13.0, 14.0]]


def test_dequantize_codes_formulas():
    codes = torch.tensor([[0, 8], [15, 3]], dtype=torch.uint8)
    s = torch.tensor([[2.0, 0.5]], dtype=torch.float16)
    assert dequantize_codes(codes, s, 2, "q_minus_8").tolist() == [[-16.0, 0.0], [14.0, -2.5]]
    assert dequantize_codes(codes, s, 2, "q_times_s").tolist() == [[0.0, 4.0], [30.0, 1.5]]


# --------------------------------------------------------------------------- correction identity
def _check_identity(A: torch.Tensor, weight: QuantizedWeight) -> None:
    """C_marlin(W_sym) + a_group_sum @ delta == A @ W_asym, to float64 rounding."""
    Ad = A.double()
    Ws, W = w_sym(weight), weight.dequantize()
    corrected = apply_marlin_correction(Ad @ Ws, A, delta_fp64(weight), weight.group_size)
    ref = reference_fp64(A, weight)
    bound = Ad.abs() @ (Ws.abs() + W.abs()) + 1e-300
    assert float(((corrected - ref).abs() / bound).max()) < 1e-13
    # and the identity is not vacuous: without the correction, or with delta = zero alone
    # (the per-column provider's delta applied to the q - 8 formula), it is wrong
    wrong = apply_marlin_correction(Ad @ Ws, A, weight.zero.double(), weight.group_size)
    if bool((weight.scale != 0).any()) and bool((A != 0).any()):
        assert float(((wrong - ref).abs() / bound).max()) > 1e-6


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("M,K,N,gs", [(1, 128, 64, 128), (7, 256, 128, 64), (33, 512, 192, 128),
                                      (16, 1024, 128, 1024)])
def test_correction_identity_random(M, K, N, gs):
    A = torch.randn(M, K, generator=_gen(M)).half()
    weight = quantize_asymmetric(torch.randn(K, N, generator=_gen(K + N)) * 0.02, gs)
    _check_identity(A, weight)


def test_correction_identity_large_activations():
    A = (torch.randn(8, 512, generator=_gen(1)) * 1e3).half()
    assert float(A.abs().max()) > 2e3
    weight = quantize_asymmetric(torch.randn(512, 128, generator=_gen(2)), 128)
    _check_identity(A, weight)


def test_correction_identity_zero_scales_and_equal_groups():
    w = torch.randn(256, 128, generator=_gen(3))
    w[:128, :40] = 0.75          # all-equal groups: scale 0, zero = the value
    w[128:, 100:] = -3.0
    weight = quantize_asymmetric(w, 128)
    assert int((weight.scale == 0).sum()) == 40 + 28
    A = torch.randn(5, 256, generator=_gen(4)).half()
    A[:, :128] = 2.0             # all-equal activation groups
    _check_identity(A, weight)
    emu = emulate_marlin(A, marlin_pack_asymmetric(weight))
    assert rel_fro(emu, reference_fp64(A, weight)) < 1e-14


def test_correction_with_nonzero_codes_under_zero_scale():
    # q is arbitrary where scale == 0; the packer stores code 8 there; W = zero either way
    q = torch.randint(0, 16, (128, 64), generator=_gen(5), dtype=torch.uint8)
    scale = torch.zeros(1, 64, dtype=torch.float16)
    zero = torch.linspace(-1, 1, 64).half()[None, :]
    weight = QuantizedWeight(q, scale, zero, group_size=128)
    A = torch.randn(3, 128, generator=_gen(6)).half()
    for formula in ("q_minus_8", "q_times_s"):
        pack = marlin_pack_asymmetric(weight, formula)
        assert torch.equal(implied_weight(pack), torch.zeros(128, 64, dtype=torch.float64))
        assert rel_fro(emulate_marlin(A, pack), reference_fp64(A, weight)) < 1e-14


# --------------------------------------------------------------------------- emulation
def _parity_by_weight() -> dict[tuple, list]:
    """Parity cases grouped by their weight (N, K, group_size, seed)."""
    groups: dict[tuple, list] = {}
    for c in MATRICES.cases("parity"):
        groups.setdefault((c.N, c.K, c.group_size, c.seed), []).append(c)
    return groups


@pytest.mark.parametrize("key", sorted(_parity_by_weight()),
                         ids=lambda k: "N{}-K{}-g{}-s{}".format(*k))
def test_emulate_marlin_equals_reference_on_parity(key):
    # Every parity case sharing this weight is checked; their activations are stacked into
    # one A (rows are independent) so the weight is packed and expanded once per formula.
    # "q_times_s" is the per-column provider's formula: checked where a weight is per-row.
    cases = _parity_by_weight()[key]
    datas = [case_data(c) for c in cases]
    A = torch.cat([d.A for d in datas])
    weight = datas[0].weight
    ref = reference_fp64(A, weight)
    rows = torch.tensor([c.M for c in cases]).cumsum(0).tolist()
    formulas = ("q_minus_8", "q_times_s") if weight.group_size == weight.K else ("q_minus_8",)
    for formula in formulas:
        emu = emulate_marlin(A, marlin_pack_asymmetric(weight, formula))
        for case, stop in zip(cases, rows, strict=True):
            sl = slice(stop - case.M, stop)
            assert rel_fro(emu[sl], ref[sl]) < 1e-12, (case.id, formula)


def test_emulate_detects_a_wrong_formula_and_a_corrupt_pack():
    case = MATRICES.cases("parity")[0]
    data = case_data(case)
    ref = reference_fp64(data.A, data.weight)
    pack = marlin_pack_asymmetric(data.weight, "q_minus_8")
    assert rel_fro(emulate_marlin(data.A, pack), ref) < 1e-12
    swapped = dataclasses.replace(pack, formula="q_times_s")   # delta no longer matches
    assert rel_fro(emulate_marlin(data.A, swapped), ref) > 1e-2
    B = pack.B.clone()
    B[0, 0] ^= 0x1                                              # one code off by one
    corrupt = dataclasses.replace(pack, B=B)
    assert rel_fro(emulate_marlin(data.A, corrupt), ref) > 1e-9


def test_implied_weight_matches_formulas():
    weight = quantize_asymmetric(torch.randn(256, 128, generator=_gen(8)), 64)
    p8 = marlin_pack_asymmetric(weight, "q_minus_8")
    pq = marlin_pack_asymmetric(weight, "q_times_s")
    assert torch.equal(implied_weight(p8), w_sym(weight))
    assert torch.equal(implied_weight(pq), weight.q.double() * weight.expand(weight.scale.double()))
    W = weight.dequantize()
    assert torch.equal(implied_weight(p8) + weight.expand(p8.delta.double()), W)
    assert torch.equal(implied_weight(pq) + weight.expand(pq.delta.double()), W)


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("call,field", [
    (lambda: a_group_sum(torch.zeros(2, 10), 3), "group_size:"),
    (lambda: a_group_sum(torch.zeros(2, 10), 0), "group_size:"),
    (lambda: a_group_sum(torch.zeros(10), 5), "A:"),
    (lambda: apply_marlin_correction(torch.zeros(2, 4), torch.zeros(2, 8), torch.zeros(3, 4), 4),
     "delta:"),
    (lambda: apply_marlin_correction(torch.zeros(2, 5), torch.zeros(2, 8), torch.zeros(2, 4), 4),
     "C_marlin:"),
    (lambda: dequantize_codes(torch.zeros(2, 2), torch.zeros(1, 2), 2, "bogus"), "formula:"),
    (lambda: implied_weight("not a pack"), "pack:"),
    (lambda: reference_fp64(torch.zeros(1, 5), quantize_asymmetric(torch.zeros(4, 2), 4)), "A:"),
])
def test_invalid_inputs_name_the_field(call, field):
    with pytest.raises(ValueError, match="^" + field):
        call()
