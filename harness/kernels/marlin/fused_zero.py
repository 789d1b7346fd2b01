"""Peer ``marlin_fused_zero``: quanto's Marlin with its fused zero point ("what a fork buys").

quanto's grouped kernel dequantizes as q * s + sz in one fp16 fma (``scale()`` in
marlin_cuda_kernel.cu: ``__hfma2(q, s, sz)``). quanto itself stores its zero-point
"shift" negated (qbits.py: ``shift = -shift`` before packing), because its own
dequantization is ``scale * q + stored_shift`` with stored_shift = -shift. TinyLoop's
weight is q * s + zero, so we pass sz = +zero (permuted like the scales): one kernel, no
correction. Per-column (groupsize -1) the kernel ignores sz and computes q * s, so per-row
weights raise ``UnsupportedCase`` with that reason.

Its error bound is Marlin's split-K bound (``facts.MARLIN_SPLIT_K_BOUND``).
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from ..base import GemmPath, KernelReturnCode, Prepared, UnsupportedCase, int4_weight_bytes
from .facts import (
    MARLIN_NONDETERMINISM,
    MARLIN_SPLIT_K_BOUND,
    MARLIN_SPLIT_K_REASON,
    MIN_CAPABILITY,
    marlin_unsupported_reason,
    marlin_weight_reason,
    rc_meaning,
)
from .pack import marlin_groupsize, marlin_pack_asymmetric, permute_scales
from .providers import PROVIDERS, new_workspace


class MarlinFusedZeroPath(GemmPath):
    """quanto's Marlin computing q * s + zero directly (grouped weights only)."""

    name = "marlin_fused_zero"
    role = "peer"
    description = "quanto Marlin with sz = zero (fused zero point, no correction)"
    nondeterminism = MARLIN_NONDETERMINISM
    is_marlin = True
    device_types = ("cuda",)
    min_capability = MIN_CAPABILITY
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 scaled zero G*N*2"

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self.arch_reason(device) or PROVIDERS["quanto"].unavailable_reason(device)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return int4_weight_bytes(K, N, groups, 2 + 2)

    def error_bound(self, case) -> tuple[float, str]:
        return MARLIN_SPLIT_K_BOUND, MARLIN_SPLIT_K_REASON

    def implementation(self, device: torch.device) -> str:
        return self.description + "; dequant fp16(q*s + zero) in one fma"

    def unsupported_reason(self, case) -> str | None:
        return marlin_unsupported_reason(case.M, case.N, case.K, case.group_size)

    def unsupported_weight_reason(self, weight: QuantizedWeight) -> str | None:
        return marlin_weight_reason(weight.N, weight.K, weight.group_size)

    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        gs = marlin_groupsize(weight.group_size, weight.K)
        if gs == -1:
            raise UnsupportedCase("marlin_fused_zero: per-column Marlin (groupsize -1) ignores sz "
                                  "and computes q*s, so a fused zero point needs grouped weights")
        weight = weight.to(device)
        pack = marlin_pack_asymmetric(weight, formula="q_minus_8")  # codes and scales only
        sz = permute_scales(weight.zero.contiguous())
        ws = new_workspace(weight.N, device)
        extra = pack.B.numel() * 4 + pack.scales.numel() * 2 + sz.numel() * 2 + ws.numel() * 4
        return Prepared(self.name, weight, device,
                        state={"pack": pack, "sz": sz, "workspace": ws, "groupsize": gs},
                        extra_bytes=extra, notes="sz = +zero in Marlin scale order")

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        st = prepared.state
        rc = PROVIDERS["quanto"].gemm(A, st["pack"], out, st["workspace"], st["groupsize"],
                                      sz=st["sz"])
        if rc != 0:
            raise KernelReturnCode(self.name, rc, rc_meaning(rc))
        return out
