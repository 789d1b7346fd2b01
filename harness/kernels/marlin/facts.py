"""Pure facts about Marlin's kernel (no torch): what its launcher accepts, what it returns,
what it needs, and how accurate it is.

* Return codes of ``marlin_cuda`` (``RC_MEANING``) and a model of them for a problem with
  default thread sizes (``expected_marlin_rc``): the dispatcher model predicts the status
  with it, the Marlin paths declare the shapes without a kernel with it
  (``marlin_unsupported_reason``).
* The groupsize a per-row weight (group_size == K) must be given: -1
  (``marlin_groupsize_for``); passing K instead is TinyLoop's first defect (rc 2).
* The load-time packer's shape limits (``packable``), the lock workspace
  (``workspace_entries``), the lowest arch (``MIN_CAPABILITY``).
* Numerics: the split-K bound and quanto's per-column bound (measured; the Marlin paths'
  ``error_bound``), and the documented race at large M (``MARLIN_NONDETERMINISM``).
"""

from __future__ import annotations

#: Marlin's return codes (marlin_cuda in marlin_cuda_kernel.cu) and what they mean.
RC_MEANING = {
    0: "ok",
    1: "problem shape not divisible by Marlin's thread tile (N % thread_n or K % thread_k)",
    2: "no Marlin kernel instantiated for this (M blocks, thread_n, thread_k, groupsize) "
       "configuration",
}
DEFAULT_MAX_PAR = 16
#: mma.sync m16n8k16 and cp.async: SM 8.0 or newer.
MIN_CAPABILITY = (8, 0)
#: why a Marlin path's output may differ between runs on identical inputs (measured on the
#: H200 with ``python -m harness.studies.determinism``: docs/measurement.md §10)
MARLIN_NONDETERMINISM = ("a race in Marlin's global reduction corrupts blocks of C in some runs at "
                         "M = 1024 on the H200 (optimum-quanto #332, vLLM #11205)")
#: Marlin splits K across thread blocks and reduces partial sums through C in fp16 (one
#: rounding per block of a column slice). Measured on an H200 (132 SMs): marlin_asym
#: 4.5e-4 .. 1.37e-3, the same call with sms=1 (no split) 4.9e-4; the correction amplifies
#: the error because |C_marlin| ~ 1.75 |C|.
MARLIN_SPLIT_K_BOUND = 2.5e-3
MARLIN_SPLIT_K_REASON = (
    "Marlin's split-K partial sums are reduced through fp16 C (one rounding per block of a "
    f"slice), amplified by the correction (bound {MARLIN_SPLIT_K_BOUND:g})")
#: quanto's per-column Marlin (groupsize -1) accumulates UNSHIFTED codes 0..15 and rounds
#: the sum to fp16 before scaling (|sum a*q| ~ 4 |C|): measured 1.9e-3 .. 6.6e-3 on an H200.
QUANTO_PER_COLUMN_BOUND = 1.2e-2
QUANTO_PER_COLUMN_REASON = (
    "quanto per-column Marlin accumulates unshifted codes (q*s) and rounds the sum to "
    f"fp16 before scaling (bound {QUANTO_PER_COLUMN_BOUND:g})")

# Marlin's kernel table (marlin_cuda's CALL_IF list): (thread_m_blocks, thread_n_blocks,
# thread_k_blocks) x group_blocks in {-1, 8}.
_MARLIN_TILES = {(1, 8, 8), (1, 16, 4), (2, 16, 4), (3, 16, 4), (4, 16, 4)}
_MARLIN_GROUP_BLOCKS = {-1, 8}


def rc_meaning(rc: int) -> str:
    return RC_MEANING.get(rc, "unknown Marlin status")


def workspace_entries(N: int, max_par: int = DEFAULT_MAX_PAR) -> int:
    """Int32 lock entries Marlin needs: N / 128 * max_par."""
    return N // 128 * max_par


def packable(K: int, N: int) -> bool:
    """Whether the load-time Marlin packer takes this shape (K % 16, N % 64)."""
    return K % 16 == 0 and N % 64 == 0


def marlin_groupsize_for(group_size: int, K: int, translate: bool = True) -> int:
    """The groupsize to hand Marlin: -1 for a per-row weight (group_size == K) when
    ``translate``; ``translate=False`` keeps K (the seed's defect: no kernel, rc 2)."""
    return -1 if translate and group_size == K else group_size


def expected_marlin_rc(M: int, N: int, K: int, groupsize: int,
                       max_par: int = DEFAULT_MAX_PAR) -> int:
    """The status marlin_cuda returns for this problem with default thread sizes (a model)."""
    thread_k, thread_n = (128, 128) if M <= 16 else (64, 256)
    group_blocks = -1 if groupsize == -1 else groupsize // 16
    if N % thread_n or K % thread_k or (group_blocks != -1 and K % group_blocks):
        return 1
    if M == 0:
        return 0
    tot = -(-M // 16)
    pad = 16 * tot - M
    rc, i = 0, 0
    while i < tot:
        m_blocks = tot - i
        if m_blocks > 4:
            par = min(max((16 * m_blocks - pad) // 64, 1), max_par)
            i += 4 * (par - 1)
            m_blocks = 4
        if (m_blocks, thread_n // 16, thread_k // 16) not in _MARLIN_TILES \
                or group_blocks not in _MARLIN_GROUP_BLOCKS:
            rc = 2
        i += 4
    return rc


def marlin_weight_reason(N: int, K: int, group_size: int) -> str | None:
    """Why Marlin has no kernel for this weight at any batch size, or None: a model's layer
    that a Marlin path cannot take whatever M its calls bring (e.g. K or N = 576, a
    hidden size of SmolLM2-135M: neither tile of ``expected_marlin_rc`` divides it).
    Uses the translated group size (per-row -> -1), as ``marlin_unsupported_reason``."""
    if N % 64 or K % 16:
        return f"Marlin's layout needs N % 64 == 0 and K % 16 == 0 (N={N}, K={K})"
    gs = marlin_groupsize_for(group_size, K)
    small, large = (expected_marlin_rc(M, N, K, gs) for M in (1, 64))   # the two tiles
    if not (small and large):
        return None
    return (f"Marlin has no kernel for this weight at any batch size (N={N}, K={K}, "
            f"groupsize {gs}): rc={small} at M <= 16 (128x128 tiles), rc={large} above "
            f"(64x256): {rc_meaning(small)}"
            + ("" if large == small else f"; {rc_meaning(large)}"))


def marlin_unsupported_reason(M: int, N: int, K: int, group_size: int) -> str | None:
    """Why Marlin has no kernel for this shape (known before the call), or None.

    Uses the translated group size (per-row -> -1), so a path that forgets the
    translation still reaches the kernel and gets its real rc=2 (an ERROR, not this).
    """
    if N % 64 or K % 16:
        return f"Marlin's layout needs N % 64 == 0 and K % 16 == 0 (N={N}, K={K})"
    rc = expected_marlin_rc(M, N, K, marlin_groupsize_for(group_size, K))
    if rc:
        return ("Marlin has no kernel for this shape: "
                f"its launcher returns rc={rc} ({rc_meaning(rc)})")
    return None
