"""Path ``native_int4``: TinyLoop's scalar INT4 GEMM, the fallback that always works.

On a GPU this is the harness's own CUDA kernel (``csrc/native_int4.cu``): one thread per
output cell looping over K, packed int4 codes with per-group fp16 scale and zero, fp32
accumulation, fp16 out. Intentionally naive; threads of a warp own consecutive columns so
weight reads coalesce, and nothing more.

Packing (``pack_native_int4``): codes ``q[K, N]`` -> int32 ``[K/8, N]``, word (kb, n)
holding ``q[8*kb + i, n]`` in bits ``4i..4i+3`` (K-major: a warp reading row kb of the
packed matrix reads 32 consecutive words). Requires K % 8 == 0 and group_size % 8 == 0.

On a CPU the fp32 torch reference on the dequantized weight stands in (A and W in
float32, one matmul, rounded to fp16) and ``implementation()`` says so.
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from .base import GemmPath, Prepared, int4_weight_bytes
from .build import BuildError, extension, extension_unavailable_reason

CODES_PER_WORD = 8


class NativeInt4Error(ValueError):
    """A weight the native kernel's layout cannot hold; the message names the field."""


def native_unsupported_reason(weight: QuantizedWeight) -> str | None:
    """None when the CUDA kernel can take ``weight``; otherwise a one-line reason."""
    if weight.K % CODES_PER_WORD:
        return f"K={weight.K} is not a multiple of {CODES_PER_WORD} (codes per packed word)"
    if weight.group_size % CODES_PER_WORD:
        return f"group_size={weight.group_size} is not a multiple of {CODES_PER_WORD}"
    return None


def pack_native_int4(q: torch.Tensor) -> torch.Tensor:
    """uint8 codes [K, N] (0..15) -> int32 [K/8, N], 8 codes per word along K."""
    if q.dim() != 2 or q.dtype != torch.uint8:
        raise NativeInt4Error(f"q: must be a 2-D uint8 tensor, got {q.dtype} with {q.dim()} dims")
    K, N = q.shape
    if K % CODES_PER_WORD:
        raise NativeInt4Error(f"q: K={K} is not a multiple of {CODES_PER_WORD}")
    if q.numel() and int(q.max()) > 15:
        raise NativeInt4Error("q: codes must lie in 0..15")
    nib = q.reshape(K // CODES_PER_WORD, CODES_PER_WORD, N).to(torch.int64)
    shifts = (4 * torch.arange(CODES_PER_WORD, device=q.device, dtype=torch.int64))[None, :, None]
    words = (nib << shifts).sum(dim=1)                      # 0 .. 2^32 - 1, exact in int64
    words = torch.where(words >= 2**31, words - 2**32, words)  # two's complement view
    return words.to(torch.int32).contiguous()


def unpack_native_int4(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of ``pack_native_int4``: int32 [K/8, N] -> uint8 [K, N]."""
    if packed.dim() != 2 or packed.dtype != torch.int32:
        raise NativeInt4Error("packed: must be a 2-D int32 tensor")
    kb, N = packed.shape
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = 4 * torch.arange(CODES_PER_WORD, device=packed.device, dtype=torch.int64)
    shifts = shifts[None, :, None]
    nib = (words[:, None, :] >> shifts) & 0xF
    return nib.reshape(kb * CODES_PER_WORD, N).to(torch.uint8)


class NativeInt4Path(GemmPath):
    """TinyLoop's naive scalar INT4 kernel (fp32 torch reference on a CPU)."""

    name = "native_int4"
    role = "path"
    description = "scalar CUDA kernel: one thread per output, loop over K, fp32 accumulation"
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 zero G*N*2"

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type == "cpu":
            return None
        if device.type != "cuda":
            return f"no native INT4 implementation for device type {device.type!r}"
        return extension_unavailable_reason()        # says why when there is no usable GPU

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return int4_weight_bytes(K, N, groups, 2 + 2)

    def implementation(self, device: torch.device) -> str:
        if device.type == "cpu":
            return "CPU stand-in: fp32 torch matmul on the dequantized weight (not the CUDA kernel)"
        return "harness CUDA kernel native_int4 (" + self.description + ")"

    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        weight = weight.to(device)
        if device.type == "cpu":
            W = weight.dequantize(torch.float64).to(torch.float32)
            return Prepared(self.name, weight, device, state={"W": W},
                            extra_bytes=W.numel() * W.element_size(),
                            notes="CPU stand-in holds an fp32 dequantized weight")
        reason = native_unsupported_reason(weight)
        if reason:
            raise NativeInt4Error(f"weight: {reason}")
        state = {
            "Bq": pack_native_int4(weight.q),
            "scale": weight.scale.contiguous(),
            "zero": weight.zero.contiguous(),
        }
        return Prepared(self.name, weight, device, state=state, extra_bytes=0)

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        st = prepared.state
        if prepared.device.type == "cpu":
            out.copy_(A.float() @ st["W"])
            return out
        try:
            ext = extension()
        except BuildError as exc:  # prepare succeeded, so this is unexpected
            raise RuntimeError(str(exc)) from None
        ext.native_int4_gemm(A, st["Bq"], st["scale"], st["zero"], out, prepared.weight.group_size)
        return out
