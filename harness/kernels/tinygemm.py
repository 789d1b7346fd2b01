"""Peer ``tinygemm``: PyTorch's ``torch.ops.aten._weight_int4pack_mm`` (a comparison column).

bf16 only: A, scales, zeros and C are bfloat16 (``Prepared.input_dtype``/``output_dtype``),
so its error is a bf16 error and it is not held to the fp16 gate. Group sizes 32, 64,
128 and 256 only: per-row weights (group_size == K) raise ``UnsupportedCase``.

Its dequantization is (q - 8) * s + z with z a float zero point, so TinyLoop's
W = q * s + zero maps to z_tg = zero + 8 * s (computed exactly, then rounded to bf16
together with s: the bf16 rounding of s and z is part of this peer's error).

Weight conversion (torch >= 2.5, checked on the device): ``_convert_weight_to_int4pack(
uint8 [N, K/2], innerKTiles)`` with byte j of row n = (q[n, 2j] << 4) | q[n, 2j+1];
scales and zeros go in one bf16 tensor [K/gs, N, 2]. Older torch took int32 [N, K]; that
form is tried second and ``Prepared.notes`` says which one was used. ``run`` copies the
op's fresh result into ``out`` (the op has no out= form): one extra small copy per call.

Error bound: bf16 operands land between 1e-3 and 1e-2 (measured 4.3e-3 to 5.1e-3 on an
H200 over the parity matrix), so the peer is held to ``BF16_GATE``.
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from .base import GemmPath, Prepared, UnsupportedCase, int4_weight_bytes

GROUP_SIZES = (32, 64, 128, 256)
#: The bound of a bf16 path (see the module docstring).
BF16_GATE = 1e-2


def _ops_reason() -> str | None:
    for op in ("_convert_weight_to_int4pack", "_weight_int4pack_mm"):
        if not hasattr(torch.ops.aten, op):
            return f"torch {torch.__version__} has no torch.ops.aten.{op}"
    return None


def op_schemas() -> dict[str, str]:
    """The two ops' schemas in this torch (recorded in results as a fact about the build)."""
    out = {}
    for op in ("_convert_weight_to_int4pack", "_weight_int4pack_mm"):
        try:
            out[op] = str(getattr(torch.ops.aten, op).default._schema)
        except (AttributeError, RuntimeError) as exc:
            out[op] = f"unavailable ({exc})"
    return out


def inner_k_tiles(K: int) -> int:
    for t in (8, 4, 2):
        if K % (16 * t) == 0:
            return t
    raise UnsupportedCase(f"tinygemm needs K % 32 == 0, got K={K}")


def tinygemm_shape_reason(K: int, N: int, group_size: int) -> str | None:
    """Why tinygemm has no kernel for a [K, N] weight in groups of ``group_size``, or None."""
    if group_size not in GROUP_SIZES:
        kind = " (per-row)" if group_size == K else ""
        return (f"tinygemm supports group sizes {', '.join(map(str, GROUP_SIZES))}; "
                f"this weight has group_size={group_size}{kind}")
    if K % 32:
        return f"tinygemm needs K % 32 == 0, got K={K}"
    if N % 8:
        return f"tinygemm needs N % 8 == 0, got N={N}"
    return None


def tinygemm_unsupported_reason(weight: QuantizedWeight) -> str | None:
    return tinygemm_shape_reason(weight.K, weight.N, weight.group_size)


def scales_and_zeros(weight: QuantizedWeight) -> torch.Tensor:
    """bf16 [G, N, 2]: (scale, zero + 8 * scale), both from exact float64 values."""
    s = weight.scale.double()
    z = weight.zero.double() + 8.0 * s
    return torch.stack([s, z], dim=-1).to(torch.bfloat16).contiguous()


def convert_weight(q: torch.Tensor, inner: int) -> tuple[torch.Tensor, str]:
    """Codes q [K, N] -> tinygemm's packed layout; (tensor, which input form worked)."""
    qt = q.t().contiguous()                                   # [N, K]
    u8 = ((qt[:, 0::2] << 4) | qt[:, 1::2]).contiguous()      # [N, K/2]
    try:
        return (torch.ops.aten._convert_weight_to_int4pack(u8, inner),
                f"uint8 [N, K/2], innerKTiles={inner}")
    except RuntimeError as first:
        try:
            packed = torch.ops.aten._convert_weight_to_int4pack(qt.to(torch.int32), inner)
        except RuntimeError:
            raise first from None
        return packed, f"int32 [N, K] (pre-2.5 form), innerKTiles={inner}"


class TinygemmPath(GemmPath):
    """torch's tinygemm INT4 kernel (bf16), a peer column."""

    name = "tinygemm"
    role = "peer"
    description = "torch.ops.aten._weight_int4pack_mm (tinygemm), bf16, (q-8)*s + z"
    device_types = ("cuda",)
    min_capability = (8, 0)
    weight_formula = "int4 K*N/2 + bf16 scales_and_zeros G*N*4"

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return "tinygemm peer is measured on CUDA only (its CPU op is a different kernel)"
        return self.arch_reason(device) or _ops_reason()

    def unsupported_reason(self, case) -> str | None:
        return tinygemm_shape_reason(case.K, case.N, case.group_size)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return int4_weight_bytes(K, N, groups, 2 * 2)       # bf16 (scale, zero) pairs

    def error_bound(self, case) -> tuple[float, str]:
        return BF16_GATE, f"bf16 path: gated at {BF16_GATE:g}"

    def implementation(self, device: torch.device) -> str:
        return f"{self.description}; torch {torch.__version__}"

    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        reason = tinygemm_unsupported_reason(weight)
        if reason:
            raise UnsupportedCase(reason)
        weight = weight.to(device)
        inner = inner_k_tiles(weight.K)
        B, form = convert_weight(weight.q, inner)
        sz = scales_and_zeros(weight)
        extra = B.numel() * B.element_size() + sz.numel() * sz.element_size()
        return Prepared(self.name, weight, device, state={"B": B, "sz": sz},
                        input_dtype=torch.bfloat16, output_dtype=torch.bfloat16,
                        extra_bytes=extra, notes=f"convert input {form}; result copied into out")

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        st = prepared.state
        out.copy_(torch.ops.aten._weight_int4pack_mm(A, st["B"], prepared.weight.group_size,
                                                     st["sz"]))
        return out
