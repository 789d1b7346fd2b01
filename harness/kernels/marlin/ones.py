"""Variant ``ones`` of marlin_asym's correction: the row sums from Marlin's own columns.

For a per-column weight (one group of K rows) the correction is a rank-1 update,
C[m, n] += a_sum[m] * delta[n]. The other variants compute a_sum in a kernel of their own
(on a side stream, joined before the accumulation). Here the weight is packed a second
time with ``ONES_EXTRA`` more columns whose dequantized value is exactly 1 under the
provider's formula (code 9 at scale 1 for ``q_minus_8``, code 1 for ``q_times_s``). Unmodified
Marlin then writes a_sum[m] into its output column N: fp32 inside Marlin, fp16 in C. One
kernel (``csrc/correction_variant_ones.cu``) writes out = C_ext[:, :N] + C_ext[:, N] *
delta, reading C once and writing it once, as the rmw floor does.

Why, and what it costs (docs/hopper.md §5.9): rounding the sums to fp16 keeps the
correction within 1.45 ULP of exact on every per-column production shape, measured on the
CPU. Grouped weights (2776 ULP: their G products cancel) run ``ONES_FALLBACK`` instead.
Marlin at N + 128 or N + 256 took +0.2% of its time at the decode median on an H100.
Memory: the second pack (K x (N + 256) codes, its scales and workspace), built at
``prepare`` when the path's variant is ``ones`` (and counted in ``Prepared.extra_bytes``),
else on the first ``ones`` call of a prepared weight (the correction study asks for every
variant of one prepared weight); and one fp16 [M, N + 256] buffer per M, made on the first
call of that M (outside any timing: every timer warms up first), not counted.

Extension point: ``ones_takes`` (which weights the variant runs on).
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from ..build import extension
from .facts import DEFAULT_MAX_PAR
from .pack import MarlinPack, scaled_zero
from .providers import new_workspace

#: Columns appended to the weight. N + 256 keeps Marlin's N % 256 rule at M > 16 wherever
#: N itself keeps it, so the variant runs wherever the plain call does.
ONES_EXTRA = 256
#: What ``ones`` runs for a weight it does not take (grouped: fp16 sums break the bound).
ONES_FALLBACK = "wide"
#: Per dequantization formula, the code whose value is 1 at scale 1.
ONE_CODE = {"q_minus_8": 9, "q_times_s": 1}


def ones_takes(group_rows: int, K: int) -> bool:
    """Whether the variant runs on a weight whose groups have ``group_rows`` of its K rows:
    per-column weights only (one group)."""
    return group_rows == K


def extended_weight(weight: QuantizedWeight, formula: str) -> QuantizedWeight:
    """``weight`` with ``ONES_EXTRA`` columns whose dequantized value under ``formula`` is
    exactly 1 (their zero point is 0: their delta is never used)."""
    if formula not in ONE_CODE:
        raise ValueError(f"formula: {formula!r} is not one of {', '.join(ONE_CODE)}")
    K = weight.K
    G = K // weight.group_size
    dev = weight.q.device
    q = torch.cat([weight.q, torch.full((K, ONES_EXTRA), ONE_CODE[formula], dtype=torch.uint8,
                                        device=dev)], dim=1)
    ones = torch.ones((G, ONES_EXTRA), dtype=torch.float16, device=dev)
    return QuantizedWeight(q, torch.cat([weight.scale, ones], dim=1),
                           torch.cat([weight.zero, torch.zeros_like(ones)], dim=1),
                           weight.group_size)


def ones_state(state: dict, weight: QuantizedWeight, pack_weight) -> dict:
    """The variant's part of a prepared weight's ``state``, built on first use: the
    extended pack (``pack_weight``: the path's own packer), its scaled zero points and
    workspace, and the [M, N + ONES_EXTRA] output buffers by M."""
    if "ones" not in state:
        pack: MarlinPack = pack_weight(extended_weight(weight, state["pack"].formula),
                                       state["pack"].formula)
        state["ones"] = {"pack": pack, "sz": scaled_zero(pack),
                         "workspace": new_workspace(pack.N, weight.q.device), "c_ext": {}}
    return state["ones"]


def run_ones(state: dict, weight: QuantizedWeight, pack_weight, A: torch.Tensor,
             out: torch.Tensor, flags: int, max_par: int = DEFAULT_MAX_PAR) -> int:
    """Marlin on the extended pack into the buffer of A's M, then the one correction kernel
    into ``out`` (skipped when Marlin's status is not 0). Returns Marlin's status."""
    ones = ones_state(state, weight, pack_weight)
    pack = ones["pack"]
    M = int(A.shape[0])
    c_ext = ones["c_ext"].get(M)
    if c_ext is None:
        c_ext = ones["c_ext"][M] = torch.empty((M, pack.N), dtype=torch.float16, device=A.device)
    ext = extension()
    rc = int(ext.marlin_gemm(A, pack.B, c_ext, pack.scales, ones["sz"], ones["workspace"],
                             state["groupsize"], -1, -1, -1, max_par))
    if rc == 0:
        ext.ones_correction(out, c_ext, state["pack"].delta, flags)
    return rc
