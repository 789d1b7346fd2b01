"""CPU reference math in float64: the exact GEMM, the asymmetric correction, Marlin emulated.

* ``reference_fp64(A, weight)``: A @ W with W = q * scale + zero dequantized exactly; the
  value every path is measured against.
* ``a_group_sum`` / ``apply_marlin_correction``: the seed's Python correction reference,
  C = C_marlin + a_group_sum(A) @ delta.
* ``implied_weight(pack)``: the weight a Marlin provider really multiplies by, rebuilt from
  the packed codes and scales alone (so it checks the packing too).
* ``emulate_marlin(A, pack)``: A @ W_implied + the correction; equals A @ W_asym up to
  float64 rounding when the pack is right.

Everything runs on the tensors' device in float64 (use the CPU where float64 is slow).
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from .marlin.pack import FORMULAS, MarlinPack, unpack_codes, unpermute_scales


class ReferenceInputError(ValueError):
    """Bad input to the reference math; the message names the offending field."""


def _as_matrix(t: torch.Tensor, field: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        raise ReferenceInputError(f"{field}: must be a 2-D tensor")
    return t


def reference_fp64(A: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """C[M, N] = A @ W in float64, W = q * scale + zero exactly."""
    A = _as_matrix(A, "A")
    if A.shape[1] != weight.K:
        raise ReferenceInputError(f"A: has {A.shape[1]} columns, the weight has K={weight.K}")
    W = weight.to(A.device).dequantize(torch.float64)
    return A.double() @ W


def a_group_sum(A: torch.Tensor, group_size: int) -> torch.Tensor:
    """a_sum[m, g] = sum of A[m, k] over the K rows of group g, in float64 -> [M, G]."""
    A = _as_matrix(A, "A")
    M, K = A.shape
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise ReferenceInputError(f"group_size: must be a positive int, got {group_size!r}")
    if K % group_size:
        raise ReferenceInputError(f"group_size: {group_size} does not divide K={K}")
    return A.double().reshape(M, K // group_size, group_size).sum(dim=2)


def apply_marlin_correction(C_marlin: torch.Tensor, A: torch.Tensor, delta: torch.Tensor,
                            group_size: int) -> torch.Tensor:
    """C_marlin + a_group_sum(A) @ delta, all in float64 -> [M, N]."""
    C_marlin = _as_matrix(C_marlin, "C_marlin")
    delta = _as_matrix(delta, "delta")
    a_sum = a_group_sum(A, group_size)
    M, G = a_sum.shape
    if delta.shape[0] != G:
        raise ReferenceInputError(
            f"delta: has {delta.shape[0]} groups, A has {G} of size {group_size}")
    if tuple(C_marlin.shape) != (M, delta.shape[1]):
        raise ReferenceInputError(
            f"C_marlin: shape must be {(M, delta.shape[1])}, got {tuple(C_marlin.shape)}"
        )
    return C_marlin.double() + a_sum @ delta.to(a_sum.device).double()


def dequantize_codes(codes: torch.Tensor, scale: torch.Tensor, group_size: int,
                     formula: str) -> torch.Tensor:
    """A provider's dequantization in float64: codes [K, N], natural-order scale [G, N]."""
    if formula not in FORMULAS:
        raise ReferenceInputError(f"formula: {formula!r} is not one of {', '.join(FORMULAS)}")
    K, N = codes.shape
    if scale.dim() != 2 or scale.shape[1] != N or scale.shape[0] * group_size != K:
        raise ReferenceInputError(
            f"scale: shape {tuple(scale.shape)} does not fit codes {(K, N)} "
            f"in groups of {group_size}"
        )
    c = codes.double().reshape(scale.shape[0], group_size, N)
    if formula == "q_minus_8":
        c.sub_(8.0)
    return c.mul_(scale.double()[:, None, :]).reshape(K, N)


def implied_weight(pack: MarlinPack) -> torch.Tensor:
    """W_implied[K, N] in float64, rebuilt from ``pack.B`` and ``pack.scales`` only."""
    if not isinstance(pack, MarlinPack):
        raise ReferenceInputError(f"pack: must be a MarlinPack, got {type(pack).__name__}")
    codes = unpack_codes(pack.B, pack.K, pack.N)
    scale = unpermute_scales(pack.scales)
    return dequantize_codes(codes, scale, pack.group_size, pack.formula)


def emulate_marlin(A: torch.Tensor, pack: MarlinPack) -> torch.Tensor:
    """What a Marlin provider plus the correction computes, in exact-ish float64 arithmetic."""
    A = _as_matrix(A, "A")
    if A.shape[1] != pack.K:
        raise ReferenceInputError(f"A: has {A.shape[1]} columns, the pack has K={pack.K}")
    C = A.double() @ implied_weight(pack).to(A.device)
    return apply_marlin_correction(C, A, pack.delta, pack.group_size)
