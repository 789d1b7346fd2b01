"""The ``addmm`` correction variant: the rank-G update on tensor cores, through cuBLAS.

The correction adds a_sum @ delta to Marlin's C, with a_sum [M, G] the group sums of A and
delta [G, N] in float32 (``harness.kernels.marlin.pack``): a GEMM of inner size G. Issue 41
asks whether a tensor-core accumulation beats the CUDA accumulation kernels at M = 1024,
where those run at several times their byte floor. This variant asks cuBLAS: one
``C.addmm_(a, d)`` (beta 1, float32 accumulation, C read and rounded once, as the rmw
floor reads and writes it). fp16 operands would round the group sums and delta to 11
bits, which breaks the 2-ULP bound on grouped weights, so each float32 operand is split
into two fp16 halves (``split_half``: x = hi + lo to about 22 bits; where ``lo`` is below
fp16's normal range, |x| under about 0.03, to 2^-24 absolute) and the product is
expanded to three terms, hi*hi + hi*lo + lo*hi (lo*lo is below float32's own rounding of
the sum): an inner size of 3G. The products of two fp16 numbers are exact in float32,
so what is left is the accumulation's own rounding and the final one to fp16.

A probe, not a kernel: after Marlin it runs the group sums (a torch reduction in
float32), two elementwise kernels for the split, one concatenation and the GEMM; delta's
split is made once per prepared weight (``delta_operand``). Its extra launches cost it
the decode shapes; what it measures is the accumulation at large M.
"""

from __future__ import annotations

import torch

#: The variant's name (``harness.kernels.marlin.variants.VARIANTS``).
ADDMM = "addmm"


def refuse_flags(flags: int) -> None:
    """The planted-defect flags act on the CUDA correction only: refuse them here, in one
    line, rather than run a correction that ignores them."""
    if flags:
        raise ValueError(f"variant {ADDMM!r}: correction flags {flags} act on the CUDA "
                         "correction only; this variant has none")


def split_half(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (float32) as ``hi + lo``, both float16: ``hi`` its rounding, ``lo`` the rest's."""
    if x.dtype != torch.float32:
        raise TypeError(f"split_half: x must be float32, got {x.dtype}")
    hi = x.to(torch.float16)
    return hi, (x - hi.to(torch.float32)).to(torch.float16)


def delta_operand(delta: torch.Tensor) -> torch.Tensor:
    """[3G, N] float16 ``[d_hi; d_lo; d_hi]`` for delta [G, N] (float32): the right operand
    whose product with ``[a_hi | a_hi | a_lo]`` is a_hi*d_hi + a_hi*d_lo + a_lo*d_hi."""
    hi, lo = split_half(delta)
    return torch.cat([hi, lo, hi], dim=0).contiguous()


def addmm_correction(A: torch.Tensor, C: torch.Tensor, d3: torch.Tensor,
                     group_rows: int) -> torch.Tensor:
    """C += a_group_sum(A) @ delta in place, with ``d3 = delta_operand(delta)`` and
    ``group_rows`` the rows of one group (K for a per-column weight); returns C."""
    M, K = A.shape
    if K % group_rows or d3.shape[0] != 3 * (K // group_rows) or C.shape != (M, d3.shape[1]):
        raise ValueError(f"addmm_correction: A {tuple(A.shape)}, C {tuple(C.shape)}, "
                         f"delta operand {tuple(d3.shape)} and groups of {group_rows} rows "
                         "do not fit")
    a_sum = A.view(M, K // group_rows, group_rows).sum(dim=2, dtype=torch.float32)
    hi, lo = split_half(a_sum)
    return C.addmm_(torch.cat([hi, hi, lo], dim=1), d3)
