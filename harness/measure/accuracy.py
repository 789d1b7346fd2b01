"""Accuracy metrics of a GEMM output against its float64 reference, in NumPy.

Inputs may be NumPy arrays, torch tensors (any dtype and device, bf16 included) or
anything ``np.asarray`` accepts; torch is never imported here. Everything is compared in
float64.

ULP convention (``ulp_size``): the spacing of the *output* format (fp16 or bf16) at the
exact value |ref|, i.e. the ulp of the binade [2^e, 2^(e+1)) that contains |ref|:
2^(e - 10) for fp16 (11-bit significand), 2^(e - 7) for bf16 (8-bit). Consequences:
  * Below the smallest normal (2^-14 fp16, 2^-126 bf16) the spacing is the subnormal
    one, 2^-24 (fp16) or 2^-133 (bf16); that is also the floor of every ULP size.
  * ref == 0 (either sign) gets that floor, so an output of 0 scores 0 ULP and the
    smallest subnormal scores 1 ULP.
  * A power of two belongs to the binade above it: for ref = 1.0 the next fp16 value up
    (1 + 2^-10) is 1 ULP away and the next one down (1 - 2^-11) is 0.5 ULP away.
  * Sign does not matter (-x has the ULP size of x), so out = -ref scores 2|ref|/ulp.
  * Above the largest finite value (65504 fp16) the binade formula simply continues
    (ulp 2^(e - 10) with an unbounded e); an output that overflowed to Inf is counted
    as non-finite instead (see ``accuracy_stats``).
  * A non-finite ref gives a NaN/Inf ULP size; ``accuracy_stats`` counts it as non-finite.

Scale-aware ULP (``rms_ulp_error``; ``rms_ulp_p99`` / ``rms_ulp_max`` of the stats): for
output element (m, n) of an M x N output,

    rms_ulp[m, n] = |out[m, n] - ref[m, n]| / ulp_size(rms_m),
    rms_m = sqrt(mean over n' = 0..N-1 of ref[m, n']^2)      (row m of the reference),

with ``ulp_size`` the convention above in the output format. A row whose RMS is 0 (an
all-zero reference row) gets the subnormal floor like ref == 0 does. An input of more
than two dimensions is read as rows over its last axis; a 1-D input is one row.
``rms_ulp_p99`` is the 0.99 quantile (linear interpolation, ``np.quantile``'s default)
and ``rms_ulp_max`` the maximum of ``rms_ulp`` over all elements.

Why: the per-element figure (``ulp_error``) divides by the ULP at each element's *own*
magnitude. A GEMM output element that nearly cancels (|ref| far below the row's typical
size) has a tiny ULP, so an ordinary rounding error there reads as thousands of ULPs:
rows of the matrices showed max ULP 13,575-320,960 at rel_err 2.5e-3, the figures are
dominated by whichever elements happen to sit nearest zero, and they move when a
summation order changes. A GEMM's rounding error scales with the magnitude of the
accumulated dot products, i.e. with the row's size, not with each result; measured in
ULPs at the row's RMS the error reads as "how many last places of a typical output of
this row", comparable across shapes and between runs. A correctly rounded output scores
0.5 x ulp(its own value) / ulp(rms_m) at most: 0.5 or less up to the RMS's binade, more
above it (at most sqrt(N) since |ref| <= sqrt(N) rms_m). So rms_ulp_max follows a row's
largest elements (the harness's outlier columns: ~8 for exact-then-rounded CPU paths)
while rms_ulp_p99 stays near 1 for them; the gate compares the p99.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACCURACY_SCHEMA_VERSION = 2       # 2: rms_ulp_p99, rms_ulp_max

#: dtype name -> (significand bits incl. the implicit one, exponent of the smallest normal)
_FORMATS = {"float16": (11, -14), "bfloat16": (8, -126)}
_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16"}


class AccuracyInputError(ValueError):
    """Bad input to an accuracy metric; the message names the offending field."""


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        name = dtype
    elif str(dtype).startswith("torch."):              # torch.float16 without importing torch
        name = str(dtype)[len("torch."):]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    name = _ALIASES.get(name, name)
    if name not in _FORMATS:
        raise AccuracyInputError(f"dtype: {dtype!r} is not one of {', '.join(_FORMATS)}")
    return name


def _to_f64(x, field: str) -> np.ndarray:
    """float64 NumPy copy of an array-like; torch tensors go through .detach().cpu()."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):       # a torch tensor, without importing torch
        x = x.detach().cpu()
        if hasattr(x, "double"):
            x = x.double()                               # bf16 has no NumPy dtype
        x = x.numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AccuracyInputError(f"{field}: cannot be read as float64 numbers ({exc})") from None
    return arr


def ulp_size(ref, dtype="float16") -> np.ndarray:
    """Spacing of ``dtype`` at |ref| (float64 array, same shape). See the module docstring."""
    precision, emin = _FORMATS[_dtype_name(dtype)]
    r = np.abs(_to_f64(ref, "ref"))
    floor = np.ldexp(1.0, emin - precision + 1)           # subnormal spacing
    _, e = np.frexp(r)                                    # r = m * 2^e, m in [0.5, 1)
    with np.errstate(over="ignore"):
        ulp = np.ldexp(1.0, e - precision)  # binade 2^(e-1): ulp 2^(e-p)
    ulp = np.where(r == 0, floor, np.maximum(ulp, floor))
    return np.where(np.isfinite(r), ulp, r)               # Inf -> Inf, NaN -> NaN


def ulp_error(out, ref, dtype="float16") -> np.ndarray:
    """|out - ref| / ulp_size(ref) elementwise, in float64."""
    o, r = _to_f64(out, "out"), _to_f64(ref, "ref")
    if o.shape != r.shape:
        raise AccuracyInputError(f"out: shape {o.shape} differs from ref's {r.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(o - r) / ulp_size(r, dtype)


def row_rms(ref) -> np.ndarray:
    """RMS of each row of ``ref`` over its last axis (float64, shape ``ref.shape[:-1]``).

    A 0-d input is one row of one element (its |value|, shape ()). Each row is scaled by
    its largest magnitude first, so that squaring cannot overflow; an all-zero row gives 0.
    """
    r = np.abs(_to_f64(ref, "ref"))
    if r.ndim == 0:
        r = r.reshape(1)
    if r.shape[-1] == 0:
        return np.zeros(r.shape[:-1])
    with np.errstate(invalid="ignore", over="ignore"):
        peak = r.max(axis=-1, keepdims=True)
        safe = np.where(peak > 0, peak, 1.0)
        rms = peak[..., 0] * np.sqrt(np.mean((r / safe) ** 2, axis=-1))
    peak = peak[..., 0]
    return np.where(np.isfinite(peak), np.where(peak > 0, rms, 0.0), peak)   # Inf/NaN rows stay so


def rms_ulp_error(out, ref, dtype="float16") -> np.ndarray:
    """|out - ref| / ulp_size(RMS of ref's row) elementwise (see the module docstring)."""
    o, r = _to_f64(out, "out"), _to_f64(ref, "ref")
    if o.shape != r.shape:
        raise AccuracyInputError(f"out: shape {o.shape} differs from ref's {r.shape}")
    ulp_row = ulp_size(row_rms(r), dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.abs(o - r) / (ulp_row if r.ndim == 0 else ulp_row[..., None])


@dataclass(frozen=True)
class AccuracyStats:
    """Error of one output against its reference.

    rel_err: mean|out - ref| / mean|ref| (Marlin's own test metric; 0 when both are zero).
    rel_fro_err: ||out - ref||_F / ||ref||_F.
    max_ulp, p99_ulp, mean_ulp: per-element ULP errors (``ulp_error``) over all elements;
    detail: dominated by the elements nearest zero.
    rms_ulp_p99, rms_ulp_max: the scale-aware ULP errors (``rms_ulp_error``: at the RMS of
    each reference row) over all elements, p99 and max; the gate compares rms_ulp_p99.
    frac_over_budget: fraction of elements above ``ulp_budget`` ULP, non-finite ones included.
    nonfinite: elements where out or ref is NaN/Inf; when > 0 every error above except
    frac_over_budget is Inf (never an average that hides them) and ``passes`` is False.
    n: number of elements; dtype: the output format the ULPs refer to.
    """

    rel_err: float
    rel_fro_err: float
    max_ulp: float
    p99_ulp: float
    mean_ulp: float
    frac_over_budget: float
    ulp_budget: float
    nonfinite: int
    n: int
    dtype: str
    rms_ulp_p99: float
    rms_ulp_max: float
    version: int = ACCURACY_SCHEMA_VERSION

    def passes(self, rel_err_gate: float = 1e-3) -> bool:
        """True when every element is finite and rel_err <= rel_err_gate."""
        return self.nonfinite == 0 and self.rel_err <= rel_err_gate


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def accuracy_stats(out, ref, ulp_budget: float = 2.0, dtype="float16") -> AccuracyStats:
    """All accuracy metrics of ``out`` against ``ref`` (same shape; any array-likes)."""
    name = _dtype_name(dtype)
    o, r = _to_f64(out, "out"), _to_f64(ref, "ref")
    if o.shape != r.shape:
        raise AccuracyInputError(f"out: shape {o.shape} differs from ref's {r.shape}")
    if o.size == 0:
        raise AccuracyInputError("out: is empty")
    budget = float(ulp_budget)
    if not budget >= 0.0:
        raise AccuracyInputError(f"ulp_budget: must be >= 0, got {ulp_budget!r}")
    finite = np.isfinite(o) & np.isfinite(r)
    nonfinite = int(o.size - np.count_nonzero(finite))
    if nonfinite:
        ulps = ulp_error(o[finite], r[finite], name)
        over = int(np.count_nonzero(ulps > budget)) + nonfinite
        inf = float("inf")
        return AccuracyStats(inf, inf, inf, inf, inf, over / o.size, budget, nonfinite,
                             int(o.size), name, inf, inf)
    diff = np.abs(o - r)
    ulps = ulp_error(o, r, name)
    rms_ulps = rms_ulp_error(o, r, name)
    return AccuracyStats(
        rel_err=_ratio(float(diff.mean()), float(np.abs(r).mean())),
        rel_fro_err=_ratio(float(np.linalg.norm(diff)), float(np.linalg.norm(r))),
        max_ulp=float(ulps.max()),
        p99_ulp=float(np.quantile(ulps, 0.99)),
        mean_ulp=float(ulps.mean()),
        frac_over_budget=float(np.count_nonzero(ulps > budget)) / o.size,
        ulp_budget=budget,
        nonfinite=0,
        n=int(o.size),
        dtype=name,
        rms_ulp_p99=float(np.quantile(rms_ulps, 0.99)),
        rms_ulp_max=float(rms_ulps.max()),
    )
