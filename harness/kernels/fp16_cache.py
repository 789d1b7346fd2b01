"""Path ``fp16_cache``: TinyLoop's FP16 body cache, the weight dequantized once, then cuBLAS.

``prepare`` dequantizes W = q * scale + zero exactly (float64) and rounds it once to a
float16 [K, N] cache; ``extra_bytes`` is that cache (4x the int4 codes). ``run`` is
``torch.matmul(A, W, out=out)``: cuBLAS on a GPU, torch's fp16 CPU matmul on a CPU.
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from .base import GemmPath, Prepared


class Fp16CachePath(GemmPath):
    """Dequantize once at load time to fp16; every call is a plain fp16 GEMM."""

    name = "fp16_cache"
    role = "path"
    description = "fp16 dequantized weight cache + torch.matmul (cuBLAS)"
    weight_formula = "fp16 weight K*N*2"

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self.arch_reason(device)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return K * N * 2                  # the dequantized cache: scales and zeros folded in

    def implementation(self, device: torch.device) -> str:
        if device.type == "cpu":
            return "fp16 dequantized weight cache + torch.matmul in fp16 on the CPU"
        return "fp16 dequantized weight cache + torch.matmul (cuBLAS)"

    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        weight = weight.to(device)
        W = weight.dequantize(torch.float64).to(torch.float16).contiguous()
        return Prepared(self.name, weight, device, state={"W": W},
                        extra_bytes=W.numel() * W.element_size(),
                        notes="extra_bytes is the fp16 [K, N] cache")

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.matmul(A, prepared.state["W"], out=out)
        return out
