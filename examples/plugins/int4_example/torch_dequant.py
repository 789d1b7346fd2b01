"""``torch_dequant``: the simplest honest INT4 path, a kernel author's starting point.

The weight stays on the device as TinyLoop stores it (one uint8 code per element, fp16
scale and zero per group and column). Every call dequantizes it, W = q * scale + zero in
float32 rounded once to float16, and multiplies with ``torch.matmul``: on a GPU that is an
elementwise kernel plus cuBLAS, on a CPU torch's fp16 matmul. Correct on any device; the
per-call dequantization is what a real kernel avoids.
"""

from __future__ import annotations

import torch

from harness.kernels.base import GemmPath, Prepared


class TorchDequantPath(GemmPath):
    """Dequantize per call in plain torch, then ``torch.matmul``."""

    name = "torch_dequant"
    role = "path"            # a path's rows fail the gate; a "peer" would only be reported
    description = "per-call dequantize (q*scale+zero, fp32 -> fp16) + torch.matmul"
    weight_formula = "uint8 codes K*N + fp16 scale G*N*2 + fp16 zero G*N*2"

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self.arch_reason(device)        # CPU and any CUDA GPU

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return K * N + 4 * groups * N          # what run() reads of the weight, once

    def prepare(self, weight, device: torch.device) -> Prepared:
        w = weight.to(device)                  # load time: copies to the device only
        return Prepared(self.name, w, device,
                        state={"q": w.q, "scale": w.scale.float(), "zero": w.zero.float()})

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        s = prepared.state
        gs = prepared.weight.group_size
        K, N = s["q"].shape
        q = s["q"].view(K // gs, gs, N).float()
        W = (q * s["scale"][:, None, :] + s["zero"][:, None, :]).view(K, N).half()
        torch.matmul(A, W, out=out)
        return out
