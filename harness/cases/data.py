"""Deterministic case data and TinyLoop's INT4 quantization.

Bit-identical on any IEEE-754 machine: random bits come from NumPy's PCG64 bit generator
(``random_raw``, a stable stream) seeded through ``SeedSequence``; every later step uses
only correctly rounded operations (+, -, *, /, comparisons, round-to-even), never
transcendental functions whose last bit may differ between libm builds, and never a
reduction whose summation order may differ (no ``np.sum`` over random data).

Weights: an approximately normal base (Irwin-Hall of 4 uniforms), a discrete scale
mixture for heavy tails (90% x1, 8% x2.5, 2% x6) and ~1% outlier output columns x8,
times 0.02. Activations: approximately normal with ~0.5% outlier input channels x10.

Quantization (TinyLoop's asymmetric min-max, per group of ``group_size`` K rows and per
output column): scale = (max - min) / 15 and zero = min, both stored as fp16;
q = clamp(round((w - zero) / scale), 0, 15) computed with the stored fp16 values; the
dequantized weight is W = q * scale + zero, exact in fp64.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from . import streams
from .case import GemmCase
from .data_cache import cached_arrays

DATA_VERSION = 1
#: What determines the bits of the data besides the arguments: this file's and streams.py's
#: sources and the numerical libraries' versions (the disk cache's key, ``data_cache``).
VERSION_KEY = hashlib.sha256(b"|".join([
    Path(__file__).read_bytes(), Path(streams.__file__).read_bytes(),
    np.__version__.encode(), torch.__version__.encode(),
])).hexdigest()[:16]
_SQRT3 = 1.7320508075688772  # sqrt(3) as a literal: Irwin-Hall(4) has variance 1/3

# Stream ids keep weights, activations and the second SwiGLU weight independent.
_STREAM_WEIGHT, _STREAM_ACT, _STREAM_WEIGHT2 = 1, 2, 3


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """An INT4 weight as TinyLoop stores it: W[k, n] = q[k, n] * scale[g, n] + zero[g, n].

    q: [K, N] uint8 codes in 0..15. scale, zero: [K // group_size, N] float16.
    ``symmetric`` marks zero == -8 * scale exactly (upstream Marlin's convention).
    ``exact_int4`` mirrors TinyLoop's flag of the same name; the dispatcher never sends
    such weights to Marlin. The harness's converter never sets it.
    """

    q: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    group_size: int
    symmetric: bool = False
    exact_int4: bool = False
    bits: int = 4

    def __post_init__(self) -> None:
        K, N = self.q.shape
        if self.q.dtype != torch.uint8:
            raise ValueError(f"QuantizedWeight.q must be uint8, got {self.q.dtype}")
        if K % self.group_size:
            raise ValueError(f"QuantizedWeight.group_size={self.group_size} does not divide K={K}")
        for name in ("scale", "zero"):
            t = getattr(self, name)
            if t.dtype != torch.float16 or tuple(t.shape) != (K // self.group_size, N):
                raise ValueError(
                    f"QuantizedWeight.{name} must be float16 of shape {(K // self.group_size, N)}, "
                    f"got {t.dtype} {tuple(t.shape)}"
                )

    @property
    def K(self) -> int:
        return self.q.shape[0]

    @property
    def N(self) -> int:
        return self.q.shape[1]

    @property
    def groups(self) -> int:
        return self.K // self.group_size

    def expand(self, t: torch.Tensor) -> torch.Tensor:
        """Broadcast a per-(group, column) tensor [G, N] to [K, N]."""
        return t.repeat_interleave(self.group_size, dim=0)

    def dequantize(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """W = q * scale + zero, computed exactly in float64, then cast to ``dtype``."""
        w = self.q.double() * self.expand(self.scale.double()) + self.expand(self.zero.double())
        return w.to(dtype)

    def to(self, device) -> QuantizedWeight:
        return QuantizedWeight(self.q.to(device), self.scale.to(device), self.zero.to(device),
                               self.group_size, self.symmetric, self.exact_int4, self.bits)

    def nbytes_packed(self) -> int:
        """Bytes of the int4 codes (two per byte) plus fp16 scales and zeros."""
        return self.K * self.N // 2 + 2 * 2 * self.groups * self.N


def generate_weight(N: int, K: int, seed: int, stream: int = _STREAM_WEIGHT) -> torch.Tensor:
    """Full-precision weight W[K, N] (float32), heavy-tailed with a few outlier columns.

    W = z * sigma * col_scale * 0.02 in float64, rounded once to float32: z Irwin-Hall(4)
    at unit variance (stream part 0), sigma 1, 2.5 or 6 for a uniform of part 1 below
    0.90, 0.98 or above, col_scale 8 on the N // 100 columns (at least one) whose part-2
    uniforms are smallest, else 1. Computed in row chunks (``streams``), the same bits."""
    ent = (DATA_VERSION, stream, seed, N, K)
    col = streams.uniform(ent + (2,), (N,))
    n_out = max(1, N // 100)
    outlier_cols = np.argsort(col, kind="stable")[:n_out]
    col_scale = np.ones(N)
    col_scale[outlier_cols] = 8.0
    out = np.empty((K, N), dtype=np.float32)

    def fill(r0: int, r1: int) -> None:
        z = streams.normalish_rows(ent + (0,), (K, N), r0, r1, _SQRT3)
        mix = streams.uniform_at(ent + (1,), r0 * N, (r1 - r0) * N).reshape(r1 - r0, N)
        sigma = np.where(mix < 0.90, 1.0, np.where(mix < 0.98, 2.5, 6.0))
        out[r0:r1] = z * sigma * col_scale[None, :] * 0.02      # one rounding to float32

    streams.by_row_chunks(K, N, fill)
    return torch.from_numpy(out)


def generate_activations(M: int, K: int, seed: int) -> torch.Tensor:
    """Activations A[M, K] (float16): unit-variance with ~0.5% outlier channels x10."""
    ent = (DATA_VERSION, _STREAM_ACT, seed, M, K)
    ch = streams.uniform(ent + (1,), (K,))
    ch_scale = np.where(ch < 0.005, 10.0, 1.0)
    out = np.empty((M, K), dtype=np.float16)

    def fill(r0: int, r1: int) -> None:
        z = streams.normalish_rows(ent + (0,), (M, K), r0, r1, _SQRT3)
        out[r0:r1] = z * ch_scale[None, :]                        # one rounding to float16

    streams.by_row_chunks(M, K, fill)
    return torch.from_numpy(out)


def quantize_asymmetric(w: torch.Tensor, group_size: int) -> QuantizedWeight:
    """TinyLoop's asymmetric min-max INT4 quantization of W[K, N] per group per column."""
    K, N = w.shape
    if group_size <= 0 or K % group_size:
        raise ValueError(f"group_size={group_size} does not divide K={K}")
    wg = w.float().reshape(K // group_size, group_size, N)
    wmin, wmax = wg.amin(dim=1), wg.amax(dim=1)
    scale = ((wmax - wmin) / 15.0).to(torch.float16)
    zero = wmin.to(torch.float16)
    s = scale.float()[:, None, :]
    safe = torch.where(s == 0, torch.ones_like(s), s)
    q = torch.round((wg - zero.float()[:, None, :]) / safe).clamp_(0, 15)
    q = torch.where(s == 0, torch.zeros_like(q), q)
    return QuantizedWeight(q.reshape(K, N).to(torch.uint8), scale, zero, group_size)


def quantize_symmetric(w: torch.Tensor, group_size: int) -> QuantizedWeight:
    """Upstream Marlin's symmetric scheme: W = (q - 8) * scale, scale = absmax / 7."""
    K, N = w.shape
    if group_size <= 0 or K % group_size:
        raise ValueError(f"group_size={group_size} does not divide K={K}")
    wg = w.float().reshape(K // group_size, group_size, N)
    scale = (wg.abs().amax(dim=1) / 7.0).to(torch.float16)
    s = scale.float()[:, None, :]
    safe = torch.where(s == 0, torch.ones_like(s), s)
    q = (torch.round(wg / safe) + 8).clamp_(0, 15)
    q = torch.where(s == 0, torch.full_like(q, 8.0), q)
    zero = (scale.float() * -8.0).to(torch.float16)  # exact: a power-of-two multiple
    return QuantizedWeight(q.reshape(K, N).to(torch.uint8), scale, zero, group_size, symmetric=True)


@dataclass(frozen=True, eq=False)
class CaseData:
    """A case's tensors on the CPU: activations and one weight (two for a SwiGLU pair)."""

    case: GemmCase
    A: torch.Tensor
    weights: tuple[QuantizedWeight, ...]

    @property
    def weight(self) -> QuantizedWeight:
        return self.weights[0]


@lru_cache(maxsize=4)
def case_weight(N: int, K: int, group_size: int, seed: int, symmetric: bool = False,
                stream: int = _STREAM_WEIGHT) -> QuantizedWeight:
    """The quantized weight of a shape; shared by every M of that shape (cached in memory
    and on disk, ``data_cache``)."""
    def make() -> dict[str, np.ndarray]:
        w = generate_weight(N, K, seed, stream)
        qw = quantize_symmetric(w, group_size) if symmetric else quantize_asymmetric(w, group_size)
        return {"q": qw.q.numpy(), "scale": qw.scale.numpy(), "zero": qw.zero.numpy()}

    a = cached_arrays("weight", (N, K, group_size, seed, int(symmetric), stream), VERSION_KEY,
                      make)
    return QuantizedWeight(torch.from_numpy(a["q"]), torch.from_numpy(a["scale"]),
                           torch.from_numpy(a["zero"]), group_size, symmetric=symmetric)


@lru_cache(maxsize=16)
def _case_activations(M: int, K: int, seed: int) -> torch.Tensor:
    """``generate_activations`` cached: a matrix's shapes share (M, K, seed) (production:
    6 weights at K=2048 per M), and generating them was most of a GPU bench's data stage;
    on disk too (``data_cache``)."""
    a = cached_arrays("activations", (M, K, seed), VERSION_KEY,
                      lambda: {"A": generate_activations(M, K, seed).numpy()})
    return torch.from_numpy(a["A"])


def case_data(case: GemmCase, symmetric: bool = False) -> CaseData:
    """Deterministic tensors for ``case`` (CPU). Same case, same bits, on any machine."""
    A = _case_activations(case.M, case.K, case.seed).clone()   # callers own their copy
    w = case_weight(case.N, case.K, case.group_size, case.seed, symmetric)
    if case.kind == "swiglu_pair":
        w2 = case_weight(case.N, case.K, case.group_size, case.seed, symmetric, _STREAM_WEIGHT2)
        return CaseData(case, A, (w, w2))
    return CaseData(case, A, (w,))
