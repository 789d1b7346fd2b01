"""``accuracy_stats`` computed with torch on the tensors' own device (the GPU in a bench).

``harness.measure.accuracy`` is the definition: NumPy, float64, on the host. Scoring an
M=1024 x N=8192 output there copies 67 MB of float64 to the host and takes ~1 s of CPU
(two quantiles, several passes); the production matrix scores ~450 outputs, which made
the accuracy runs most of a GPU bench's "set-up" stage. This module computes the same
figures with the same conventions (ULP sizes by ``frexp``/``ldexp``, quantiles by linear
interpolation between order statistics, as ``np.quantile``'s default) in float64 on the
device. Sums may differ from NumPy's pairwise summation in the last bits;
``tests/unit/test_accuracy_torch.py`` holds the two to 1e-12 relative on the same inputs,
edge cases (zeros, subnormals, Inf/NaN, bf16) included.
"""

from __future__ import annotations

import math

import torch

from .accuracy import _FORMATS, AccuracyInputError, AccuracyStats, _dtype_name


def _ulp_size(r: torch.Tensor, precision: int, emin: int) -> torch.Tensor:
    """Spacing of the format at |r| (r >= 0, float64), as ``accuracy.ulp_size``."""
    floor = math.ldexp(1.0, emin - precision + 1)
    _, e = torch.frexp(r)
    ulp = torch.ldexp(torch.ones_like(r), (e - precision).to(r.dtype))
    ulp = torch.where(r == 0, torch.full_like(r, floor), torch.clamp(ulp, min=floor))
    return torch.where(torch.isfinite(r), ulp, r)


def _row_rms(r: torch.Tensor) -> torch.Tensor:
    """RMS of each row (last axis) of |r|, scaled by the row's peak first (``row_rms``)."""
    peak = r.amax(dim=-1, keepdim=True)
    safe = torch.where(peak > 0, peak, torch.ones_like(peak))
    rms = peak[..., 0] * torch.sqrt(torch.mean((r / safe) ** 2, dim=-1))
    peak = peak[..., 0]
    return torch.where(torch.isfinite(peak), torch.where(peak > 0, rms, torch.zeros_like(rms)),
                       peak)


def _quantile(x: torch.Tensor, q: float) -> float:
    """``np.quantile(x, q)`` (linear method) of a flat float64 tensor, by sorting (no size
    limit, unlike ``torch.quantile``)."""
    s = torch.sort(x.reshape(-1)).values
    pos = q * (s.numel() - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, s.numel() - 1)
    a, b, t = float(s[lo]), float(s[hi]), pos - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)   # numpy's _lerp


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def accuracy_stats_torch(out: torch.Tensor, ref: torch.Tensor, ulp_budget: float = 2.0,
                         dtype="float16") -> AccuracyStats:
    """``accuracy.accuracy_stats`` of two tensors, computed on ``ref``'s device."""
    name = _dtype_name(dtype)
    precision, emin = _FORMATS[name]
    o = out.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach().to(torch.float64)
    if o.shape != r.shape:
        raise AccuracyInputError(f"out: shape {tuple(o.shape)} differs from ref's "
                                 f"{tuple(r.shape)}")
    if o.numel() == 0:
        raise AccuracyInputError("out: is empty")
    budget = float(ulp_budget)
    if not budget >= 0.0:
        raise AccuracyInputError(f"ulp_budget: must be >= 0, got {ulp_budget!r}")
    n = o.numel()
    finite = torch.isfinite(o) & torch.isfinite(r)
    nonfinite = int(n - int(finite.sum()))
    ra = r.abs()
    if nonfinite:
        ulps = (o[finite] - r[finite]).abs() / _ulp_size(ra[finite], precision, emin)
        over = int((ulps > budget).sum()) + nonfinite
        inf = float("inf")
        return AccuracyStats(inf, inf, inf, inf, inf, over / n, budget, nonfinite, n, name,
                             inf, inf)
    diff = (o - r).abs()
    ulps = diff / _ulp_size(ra, precision, emin)
    rows = ra.reshape(1, -1) if ra.dim() <= 1 else ra
    ulp_row = _ulp_size(_row_rms(rows), precision, emin)
    rms_ulps = diff.reshape(rows.shape) / ulp_row[..., None]
    return AccuracyStats(
        rel_err=_ratio(float(diff.mean()), float(ra.mean())),
        rel_fro_err=_ratio(float(torch.linalg.vector_norm(diff)),
                           float(torch.linalg.vector_norm(r))),
        max_ulp=float(ulps.max()),
        p99_ulp=_quantile(ulps, 0.99),
        mean_ulp=float(ulps.mean()),
        frac_over_budget=float(int((ulps > budget).sum())) / n,
        ulp_budget=budget,
        nonfinite=0,
        n=n,
        dtype=name,
        rms_ulp_p99=_quantile(rms_ulps, 0.99),
        rms_ulp_max=float(rms_ulps.max()),
    )
