"""Statistics for the speed gate: sample tests, effect sizes, noise margins.

The speed decision (``speed_call``) needs both a *significant* difference between the two
runs' raw samples (two-sided Mann-Whitney U at ``alpha``) and a *large enough* relative
change of the median (beyond ``max(min_effect, noise margin)``). The noise margin of a
(case, path, mode) comes from A/A runs of one commit (``noise_margins``): how far the
medians of identical builds drift from run to run, a thing no single run's samples show.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..config import MIN_TEST_SAMPLES  # fewer a side: the U test cannot reach small alphas
from ..results.schema import Key, ResultRow


def median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float))) if len(values) else math.nan


def rel_change(base: float, cur: float) -> float:
    """cur / base - 1 (NaN when either is missing or base is not positive)."""
    if not (math.isfinite(base) and math.isfinite(cur)) or base <= 0:
        return math.nan
    return cur / base - 1.0


def mann_whitney_p(base: Sequence[float], cur: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value; NaN with fewer than ``MIN_TEST_SAMPLES`` a side."""
    if len(base) < MIN_TEST_SAMPLES or len(cur) < MIN_TEST_SAMPLES:
        return math.nan
    from scipy.stats import mannwhitneyu  # heavy: scipy.stats (~0.7 s), only to test samples

    a = np.asarray(base, dtype=float)
    b = np.asarray(cur, dtype=float)
    if np.all(a == a[0]) and np.all(b == b[0]) and a[0] == b[0]:
        return 1.0  # identical constants: scipy would warn and return NaN
    return float(mannwhitneyu(a, b, alternative="two-sided", method="auto").pvalue)


@dataclass(frozen=True)
class SpeedCall:
    """The speed part of a verdict: ``call`` is SAME, FASTER, SLOWER, AMBIGUOUS or NONE."""

    call: str
    base_median: float
    cur_median: float
    change: float        # relative change of the median (cur / base - 1)
    p_value: float
    threshold: float     # max(min_effect, margin)
    reason: str


def speed_call(
    base: Sequence[float], cur: Sequence[float], *, alpha: float, min_effect: float,
    margin: float = 0.0, base_median: float = math.nan, cur_median: float = math.nan,
) -> SpeedCall:
    """Decide SAME / FASTER / SLOWER / AMBIGUOUS from two sets of timing samples.

    ``base_median``/``cur_median`` stand in for the samples' medians when a side has no
    samples (then no test is possible: a big move is AMBIGUOUS, a small one SAME).
    Significant and beyond the threshold -> SLOWER/FASTER; significant but within it ->
    SAME; not significant but beyond it -> AMBIGUOUS; otherwise SAME.
    """
    mb = median(base) if len(base) else base_median
    mc = median(cur) if len(cur) else cur_median
    change = rel_change(mb, mc)
    threshold = max(min_effect, margin if math.isfinite(margin) else 0.0)
    if math.isnan(change):
        return SpeedCall("NONE", mb, mc, change, math.nan, threshold, "no timing on one side")
    p = mann_whitney_p(base, cur)
    call = call_of(change, p, threshold, alpha)
    pct = f"{change:+.2%} median"
    limit = f"threshold {threshold:.2%}"
    p_txt = f"p={p:.2g}" if math.isfinite(p) else f"no test (n={len(base)}/{len(cur)})"
    significant = math.isfinite(p) and p < alpha
    why = (f"{pct}, {p_txt}, beyond {limit}" if call in ("SLOWER", "FASTER")
           else f"{pct}, {p_txt} but within {limit}" if significant
           else f"{pct} beyond {limit} but not significant ({p_txt})" if call == "AMBIGUOUS"
           else f"{pct}, {p_txt}")
    return SpeedCall(call, mb, mc, change, p, threshold, why)


def call_of(change: float, p: float, threshold: float, alpha: float) -> str:
    """The speed call of a change: significant (``p < alpha``) and beyond ``threshold``
    -> SLOWER / FASTER; significant but within it -> SAME; not significant but beyond it
    -> AMBIGUOUS; otherwise SAME (``speed_call``'s rule, also read back from a verdict
    that kept its change, p-value and threshold)."""
    significant = math.isfinite(p) and p < alpha
    big = abs(change) > threshold
    if significant and big:
        return "SLOWER" if change > 0 else "FASTER"
    return "AMBIGUOUS" if big and not significant else "SAME"


def pairwise_median_drift(medians: Sequence[float]) -> list[float]:
    """|m_j / m_i - 1| over every pair i < j of finite, positive medians."""
    good = [m for m in medians if math.isfinite(m) and m > 0]
    return [abs(b / a - 1.0) for a, b in itertools.combinations(good, 2)]


def noise_margins(
    runs: Sequence[Mapping[Key, float]], floor: float, quantile: float = 95.0
) -> dict[Key, float]:
    """Per-key noise margin from A/A runs: ``runs[i][key]`` is run i's median for key.

    The margin is the ``quantile`` (default 95th) percentile of the absolute relative
    median difference over every pair of runs, and never below ``floor``. Keys present in
    fewer than two runs get no margin.
    """
    if len(runs) < 2:
        raise ValueError(f"noise calibration needs at least 2 runs, got {len(runs)}")
    keys = sorted(set().union(*(r.keys() for r in runs)))
    out: dict[Key, float] = {}
    for key in keys:
        drifts = pairwise_median_drift([r[key] for r in runs if key in r])
        if drifts:
            out[key] = max(floor, float(np.percentile(drifts, quantile)))
    return out


def mean_difference_se(
    a_runs: Sequence[Mapping[Key, float]], b_runs: Sequence[Mapping[Key, float]],
) -> dict[Key, tuple[float, int]]:
    """Per key, the standard error of the difference of two sides' means over their runs
    (rounds), and its degrees of freedom: on the log of the run medians (``a_runs[i][key]``
    is run i's median of side A), the pooled within-side standard deviation ``s``
    (``n_a + n_b - 2`` degrees of freedom) times ``sqrt(1/n_a + 1/n_b)``. Keys with fewer
    than two runs on a side get none."""
    keys = set().union(*(r.keys() for r in a_runs)) & set().union(*(r.keys() for r in b_runs))
    out: dict[Key, tuple[float, int]] = {}
    for key in sorted(keys):
        sides = [np.log([m for r in runs if math.isfinite(m := r.get(key, math.nan)) and m > 0])
                 for runs in (a_runs, b_runs)]
        if min(len(x) for x in sides) < 2:
            continue
        df = sum(len(x) for x in sides) - 2
        s = math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in sides) / df)
        out[key] = (s * math.sqrt(sum(1.0 / len(x) for x in sides)), df)
    return out


def mean_difference_margins(
    a_runs: Sequence[Mapping[Key, float]], b_runs: Sequence[Mapping[Key, float]],
    alpha: float, floor: float,
) -> dict[Key, float]:
    """Per-key margin for the difference of two sides' means over their runs (rounds):
    ``expm1(t_{1-alpha, df} * se)`` with ``mean_difference_se``'s standard error: one-sided,
    the move that an unchanged build exceeds with probability ``alpha`` when runs vary
    independently. Unlike ``noise_margins`` (the spread of one run), it shrinks as runs are
    added, so a noisy row measured in more rounds can confirm a smaller slowdown. Never
    below ``floor``; keys with fewer than two runs on a side get none.
    """
    from scipy.stats import t as student_t  # heavy: scipy.stats (~0.7 s), A/B rows only

    return {key: max(floor, math.expm1(float(student_t.ppf(1.0 - alpha, df)) * se))
            for key, (se, df) in mean_difference_se(a_runs, b_runs).items()}


def with_samples(row: ResultRow, samples: Sequence[float]) -> ResultRow:
    """``row`` with new raw samples; median, IQR, 95% range and the throughput columns
    (``tflops``, ``gbps``, ``pct_roofline``: all inversely proportional to time) follow."""
    text = [f"{float(x):.6g}" for x in samples]  # what the CSV keeps; stats agree with it
    s = np.asarray([float(t) for t in text], dtype=float)
    if s.size == 0:
        raise ValueError(f"{row.case_id}/{row.path}/{row.mode}: no samples")
    med = float(np.median(s))
    q1, q3, lo, hi = np.percentile(s, [25, 75, 2.5, 97.5])
    old = row.time_us_median
    scale = old / med if math.isfinite(old) and old > 0 and med > 0 else math.nan

    def rescale(x: float) -> float:
        return x * scale if math.isfinite(scale) else math.nan

    return replace(
        row, samples_us=";".join(text), n_samples=int(s.size), time_us_median=med,
        time_us_iqr=float(q3 - q1), time_us_ci_lo=float(lo), time_us_ci_hi=float(hi),
        tflops=rescale(row.tflops), gbps=rescale(row.gbps), pct_roofline=rescale(row.pct_roofline),
    )
