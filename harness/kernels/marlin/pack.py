"""Marlin's INT4 weight layout, written from the format's description (no kernel code).

Codes ``q[K, N]`` (0..15, K rows reduced over, N output columns) become ``B`` int32
``[K // 16, 2 * N]`` in four steps:

1. Tiling. The matrix is cut into 16x16 tiles; row ``kt`` of the result holds tiles
   ``(kt, 0), (kt, 1), ...`` one after another, each tile's 256 codes row-major (k, then n).
2. Fragment order. Every run of 1024 codes (four neighbouring tiles: a 16x64 block) is
   reordered so that each of the 32 lanes of a warp finds, contiguously, the codes it
   feeds to ``mma.m16n8k16`` as its B operand. In that instruction B is a 16x8 (k x n)
   block; lane ``i`` holds column ``i // 4`` and rows ``2*(i%4)``, ``2*(i%4)+1`` (first
   register) and the same two rows plus 8 (second register). A 16x16 tile is two such
   16x8 halves (columns 0..7 and 8..15), so a lane owns 8 codes of each tile and 32
   codes (one 128-bit load) of the 16x64 block: lane-major, then tile, then half, then row.
3. Dequant interleave. Inside each lane's group of 8 codes (one tile: 4 rows x 2 halves)
   the order becomes ``[0, 2, 4, 6, 1, 3, 5, 7]``, so nibbles j and j+4 of a word hold
   the two fp16 values that the kernel's bit trick turns into one half2.
4. Packing. Eight consecutive codes make one int32; code j sits in bits ``4j..4j+3``.

Scales (and quanto's scaled zero point ``sz``, same layout) ``[G, N]`` fp16 are permuted
in runs of 64 columns when grouped (G > 1) and in runs of 32 when per-column (G == 1),
matching how the kernel's threads fetch them. See ``_fragment_order`` and
``_scale_orders`` for the exact index arithmetic.

Extension point: a new Marlin provider whose kernel dequantizes differently adds one entry
to ``FORMULAS`` and one branch in ``dequantize_codes`` (harness.kernels.reference) and
in ``_delta`` here; the packed codes are the same for every formula.

Imports: ``facts`` only (no provider, no path): the packer is used by the paths, the
reference math and the dispatcher's executor alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from harness.cases.data import QuantizedWeight

from .facts import marlin_groupsize_for

MARLIN_PACK_VERSION = 1

#: How a provider's kernel turns a code c and scale s into a weight.
#:   "q_minus_8": (c - 8) * s  -- upstream Marlin, and quanto grouped with sz = -8 * s.
#:   "q_times_s": c * s         -- quanto's per-column kernel (applies s at the end, ignores sz).
FORMULAS = ("q_minus_8", "q_times_s")

TILE = 16
BLOCK_N = 64            # columns covered by one 1024-code fragment run
RUN = TILE * BLOCK_N    # 1024
_INTERLEAVE = (0, 2, 4, 6, 1, 3, 5, 7)


class MarlinPackError(ValueError):
    """Bad input to the Marlin packer; the message names the offending field."""


# --------------------------------------------------------------------------- permutations
@lru_cache(maxsize=1)
def _fragment_order() -> np.ndarray:
    """``order[j]`` = position (within a 16x64 block, tile-major) of the j-th stored code.

    A position is ``256 * tile + 16 * row + col`` with row = k offset and col = n offset
    inside the 16x16 tile.
    """
    lane = np.arange(32)[:, None, None, None]
    tile = np.arange(4)[None, :, None, None]
    half = np.arange(2)[None, None, :, None]
    row_pick = np.array([0, 1, 8, 9])[None, None, None, :]
    row = 2 * (lane % 4) + row_pick          # rows 2r, 2r+1, 2r+8, 2r+9 of the 16x8 half
    col = lane // 4 + 8 * half               # column lane//4 of half 0 or half 1
    pos = 256 * tile + 16 * row + col        # shape [32 lanes, 4 tiles, 2 halves, 4 rows]
    order = pos.reshape(-1, 8)[:, list(_INTERLEAVE)].reshape(-1)
    assert np.array_equal(np.sort(order), np.arange(RUN))
    return order


@lru_cache(maxsize=1)
def _scale_orders() -> tuple[np.ndarray, np.ndarray]:
    """(grouped order over 64 columns, per-column order over 32 columns); gather indices."""
    grouped = np.array([i + 8 * j for i in range(8) for j in range(8)])
    single = np.array([2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)])
    return grouped, single


def _inverse(order: np.ndarray) -> np.ndarray:
    inv = np.empty_like(order)
    inv[order] = np.arange(order.size)
    return inv


def _index(order: np.ndarray, device) -> torch.Tensor:
    return torch.from_numpy(order.astype(np.int64)).to(device)


# --------------------------------------------------------------------------- validation
def _check_kn(K: int, N: int, field: str) -> None:
    if K <= 0 or K % TILE:
        raise MarlinPackError(f"{field}: K={K} must be a positive multiple of {TILE}")
    if N <= 0 or N % BLOCK_N:
        raise MarlinPackError(f"{field}: N={N} must be a positive multiple of {BLOCK_N}")


def _check_group(group_size: int, K: int) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise MarlinPackError(f"group_size: must be a positive int, got {group_size!r}")
    if K % group_size:
        raise MarlinPackError(f"group_size: {group_size} does not divide K={K}")
    return K // group_size


def _check_scale(scale: torch.Tensor, G: int, N: int, field: str = "scale") -> None:
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float16:
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise MarlinPackError(f"{field}: must be a float16 tensor, got {got}")
    if tuple(scale.shape) != (G, N):
        raise MarlinPackError(f"{field}: shape must be {(G, N)}, got {tuple(scale.shape)}")
    if not bool(torch.isfinite(scale).all()):
        raise MarlinPackError(f"{field}: contains NaN or Inf")


# --------------------------------------------------------------------------- codes
def pack_codes(q: torch.Tensor) -> torch.Tensor:
    """Codes ``q[K, N]`` (integer dtype, values 0..15) -> Marlin ``B`` int32 ``[K/16, 2N]``."""
    if not isinstance(q, torch.Tensor) or q.dim() != 2:
        raise MarlinPackError("q: must be a 2-D tensor [K, N]")
    if q.dtype.is_floating_point or q.dtype.is_complex or q.dtype == torch.bool:
        raise MarlinPackError(f"q: must be an integer tensor, got {q.dtype}")
    K, N = q.shape
    _check_kn(K, N, "q")
    lo, hi = int(q.min()), int(q.max())
    if lo < 0 or hi > 15:
        raise MarlinPackError(f"q: codes must lie in 0..15, got min {lo} max {hi}")
    tiles = q.to(torch.uint8).reshape(K // TILE, TILE, N // TILE, TILE).permute(0, 2, 1, 3)
    stream = tiles.reshape(-1, RUN)[:, _index(_fragment_order(), q.device)]
    nib = stream.reshape(-1, 8)
    words = torch.zeros(nib.shape[0], dtype=torch.int32, device=q.device)
    for j in range(7):
        words |= nib[:, j].to(torch.int32) << (4 * j)
    top = nib[:, 7].to(torch.int32)
    top = top - ((top >> 3) << 4)            # the nibble as a signed 4-bit value, -8..7
    words += top * (1 << 28)                 # sets bits 28..31 without signed overflow
    return words.reshape(K // TILE, 2 * N)


def unpack_codes(packed: torch.Tensor, K: int, N: int) -> torch.Tensor:
    """The exact inverse of ``pack_codes``: int32 ``[K/16, 2N]`` -> uint8 codes ``[K, N]``."""
    _check_kn(K, N, "packed")
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32:
        raise MarlinPackError("packed: must be an int32 tensor")
    if tuple(packed.shape) != (K // TILE, 2 * N):
        raise MarlinPackError(
            f"packed: shape must be {(K // TILE, 2 * N)} for K={K} N={N}, got {tuple(packed.shape)}"
        )
    words = packed.reshape(-1)
    nib = torch.empty(words.numel(), 8, dtype=torch.uint8, device=packed.device)
    for j in range(8):
        nib[:, j] = ((words >> (4 * j)) & 15).to(torch.uint8)
    stream = nib.reshape(-1, RUN)[:, _index(_inverse(_fragment_order()), packed.device)]
    tiles = stream.reshape(K // TILE, N // TILE, TILE, TILE).permute(0, 2, 1, 3)
    return tiles.reshape(K, N).contiguous()


# --------------------------------------------------------------------------- scales
def _scale_perm(s: torch.Tensor, inverse: bool, field: str) -> torch.Tensor:
    if not isinstance(s, torch.Tensor) or s.dim() != 2:
        raise MarlinPackError(f"{field}: must be a 2-D tensor [G, N]")
    G, N = s.shape
    if G < 1 or N % BLOCK_N:
        raise MarlinPackError(f"{field}: N={N} must be a multiple of {BLOCK_N} (and G >= 1)")
    grouped, single = _scale_orders()
    order = single if G == 1 else grouped
    if inverse:
        order = _inverse(order)
    return s.reshape(-1, order.size)[:, _index(order, s.device)].reshape(G, N).contiguous()


def permute_scales(s: torch.Tensor) -> torch.Tensor:
    """Scales (or sz) ``[G, N]`` -> Marlin order; per-column order when G == 1."""
    return _scale_perm(s, inverse=False, field="scales")


def unpermute_scales(s: torch.Tensor) -> torch.Tensor:
    """The inverse of ``permute_scales``."""
    return _scale_perm(s, inverse=True, field="scales")


def marlin_groupsize(group_size: int, K: int, translate: bool = True) -> int:
    """The groupsize argument Marlin expects: -1 for per-row weights (group_size == K).

    ``translate=False`` returns ``group_size`` untouched: the seed's original defect
    (Marlin then has no kernel for group_size == K and returns rc 2).
    """
    _check_group(group_size, K)
    return marlin_groupsize_for(group_size, K, translate)


# --------------------------------------------------------------------------- packs
@dataclass(frozen=True, eq=False)
class MarlinPack:
    """Everything a Marlin provider needs for one weight, built once at load time.

    B: int32 [K/16, 2N] packed codes. scales: fp16 [G, N] in Marlin order.
    sz: fp16 [G, N] in Marlin order, -8 * scale (quanto's scaled zero point), or None
    when the pack was built without one. delta: float32 [G, N] in natural order,
    W_asym - W_implied per (group, column), for the correction C += a_group_sum(A) @ delta.
    group_size: the weight's own group size (K for per-row). marlin_groupsize: what to
    pass to the kernel (-1 for per-row). formula: the provider's dequantization (FORMULAS).
    """

    B: torch.Tensor
    scales: torch.Tensor
    sz: torch.Tensor | None
    delta: torch.Tensor
    group_size: int
    marlin_groupsize: int
    K: int
    N: int
    formula: str
    version: int = MARLIN_PACK_VERSION

    def __post_init__(self) -> None:
        if self.formula not in FORMULAS:
            raise MarlinPackError(f"formula: {self.formula!r} is not one of {', '.join(FORMULAS)}")
        _check_kn(self.K, self.N, "MarlinPack")
        G = _check_group(self.group_size, self.K)
        if self.marlin_groupsize not in (-1, self.group_size) or (
                self.marlin_groupsize == -1 and self.group_size != self.K):
            raise MarlinPackError(
                f"marlin_groupsize: {self.marlin_groupsize} "
                f"does not fit group_size={self.group_size}"
            )
        expect = {"B": (torch.int32, (self.K // TILE, 2 * self.N)),
                  "scales": (torch.float16, (G, self.N)), "delta": (torch.float32, (G, self.N))}
        if self.sz is not None:
            expect["sz"] = (torch.float16, (G, self.N))
        for name, (dtype, shape) in expect.items():
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != shape:
                got = (t.dtype, tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__
                raise MarlinPackError(f"{name}: must be {dtype} of shape {shape}, got {got}")

    @property
    def groups(self) -> int:
        return self.K // self.group_size

    def to(self, device) -> MarlinPack:
        sz = None if self.sz is None else self.sz.to(device)
        return MarlinPack(self.B.to(device), self.scales.to(device), sz, self.delta.to(device),
                          self.group_size, self.marlin_groupsize, self.K, self.N, self.formula)

    def nbytes(self) -> int:
        """Device bytes of the pack (B, scales, sz, delta)."""
        ts = [self.B, self.scales, self.delta] + ([] if self.sz is None else [self.sz])
        return sum(t.numel() * t.element_size() for t in ts)


def _symmetric_codes(w_sym: torch.Tensor, scale: torch.Tensor, group_size: int) -> torch.Tensor:
    """codes = clamp(round(w / s) + 8, 0, 15) per group; s == 0 gives code 8."""
    K, N = w_sym.shape
    ct = torch.promote_types(w_sym.dtype, torch.float32)
    w = w_sym.to(ct).reshape(K // group_size, group_size, N)
    s = scale.to(ct)[:, None, :]
    zero_s = s == 0
    codes = torch.div(w, torch.where(zero_s, torch.ones_like(s), s))
    codes.round_().add_(8).clamp_(0, 15).masked_fill_(zero_s, 8.0)
    return codes.reshape(K, N).to(torch.uint8)


def marlin_pack_symmetric(w_sym: torch.Tensor, scale: torch.Tensor,
                          group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack a symmetric weight ``w_sym[K, N]`` with fp16 ``scale[G, N]``: (B, permuted scales)."""
    if not isinstance(w_sym, torch.Tensor) or w_sym.dim() != 2 or not w_sym.dtype.is_floating_point:
        raise MarlinPackError("w_sym: must be a 2-D floating-point tensor [K, N]")
    K, N = w_sym.shape
    _check_kn(K, N, "w_sym")
    G = _check_group(group_size, K)
    _check_scale(scale, G, N)
    if not bool(torch.isfinite(w_sym).all()):
        raise MarlinPackError("w_sym: contains NaN or Inf")
    return _pack_symmetric(w_sym, scale.to(w_sym.device), group_size)


def _pack_symmetric(w_sym: torch.Tensor, scale: torch.Tensor,
                    group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``marlin_pack_symmetric`` after validation."""
    return pack_codes(_symmetric_codes(w_sym, scale, group_size)), permute_scales(scale)


def _delta(weight: QuantizedWeight, formula: str) -> torch.Tensor:
    """W_asym - W_implied per (group, column), in float64."""
    zero = weight.zero.double()
    if formula == "q_minus_8":
        return zero + 8.0 * weight.scale.double()
    return zero


def scaled_zero(pack: MarlinPack) -> torch.Tensor:
    """quanto's scaled zero point for ``pack``: its ``sz``, or -8 * scale in Marlin order
    (exact in fp16) when it was built without one."""
    return pack.sz if pack.sz is not None else (pack.scales.float() * -8.0).to(torch.float16)


def marlin_pack_asymmetric(weight: QuantizedWeight, formula: str = "q_minus_8") -> MarlinPack:
    """Pack TinyLoop's asymmetric weight for an unmodified Marlin plus the correction.

    As the seed does: reconstruct w_sym = (q - 8) * scale, pack it with the symmetric
    packer, and keep delta = W_asym - W_implied (zero + 8 * scale for "q_minus_8",
    zero for "q_times_s"), computed in float64 and stored as float32. ``sz`` is
    -8 * scale (exact in fp16) in Marlin order, for quanto's grouped kernel.
    """
    if not isinstance(weight, QuantizedWeight):
        raise MarlinPackError(f"weight: must be a QuantizedWeight, got {type(weight).__name__}")
    if formula not in FORMULAS:
        raise MarlinPackError(f"formula: {formula!r} is not one of {', '.join(FORMULAS)}")
    if weight.bits != 4:
        raise MarlinPackError(f"weight.bits: Marlin packs 4-bit weights only, got {weight.bits}")
    K, N, gs = weight.K, weight.N, weight.group_size
    _check_kn(K, N, "weight")
    G = _check_group(gs, K)
    _check_scale(weight.scale, G, N, "weight.scale")
    _check_scale(weight.zero, G, N, "weight.zero")
    if float(weight.scale.abs().max()) * 8.0 > 65504.0:
        raise MarlinPackError("weight.scale: |scale| > 8188 makes sz = -8 * scale overflow float16")
    q = weight.q
    if int(q.max()) > 15:
        raise MarlinPackError(f"weight.q: codes must lie in 0..15, got max {int(q.max())}")
    # w_sym = (q - 8) * scale is exact in float32 (a 4-bit integer times an fp16 value)
    w_sym = (q.float().sub_(8.0).reshape(G, gs, N) * weight.scale.float()[:, None, :]).reshape(K, N)
    B, scales = _pack_symmetric(w_sym, weight.scale, gs)
    sz = permute_scales((weight.scale.float() * -8.0).to(torch.float16))
    delta = _delta(weight, formula).to(torch.float32)
    return MarlinPack(B=B, scales=scales, sz=sz, delta=delta, group_size=gs,
                      marlin_groupsize=marlin_groupsize(gs, K), K=K, N=N, formula=formula)
