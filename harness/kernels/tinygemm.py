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
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from .base import PATHS, GemmPath, Prepared
from .dispatch import UnsupportedCase

GROUP_SIZES = (32, 64, 128, 256)


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


def tinygemm_unsupported_reason(weight: QuantizedWeight) -> str | None:
    if weight.group_size not in GROUP_SIZES:
        kind = " (per-row)" if weight.group_size == weight.K else ""
        return (f"tinygemm supports group sizes {', '.join(map(str, GROUP_SIZES))}; "
                f"this weight has group_size={weight.group_size}{kind}")
    if weight.K % 32:
        return f"tinygemm needs K % 32 == 0, got K={weight.K}"
    if weight.N % 8:
        return f"tinygemm needs N % 8 == 0, got N={weight.N}"
    return None


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
        return torch.ops.aten._convert_weight_to_int4pack(u8, inner), f"uint8 [N, K/2], innerKTiles={inner}"
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

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return "tinygemm peer is measured on CUDA only (its CPU op is a different kernel)"
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch"
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 0):
            return f"tinygemm needs SM 8.0 or newer; this GPU is SM {major}.{minor}"
        return _ops_reason()

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
        out.copy_(torch.ops.aten._weight_int4pack_mm(A, st["B"], prepared.weight.group_size, st["sz"]))
        return out


PATH = PATHS.register(TinygemmPath())
