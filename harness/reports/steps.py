"""Steps in a results history: where a row's time or accuracy moved, with the gate's verdict.

Time, per row (``time_steps``): the row's per-commit medians, on a log scale, are cut into
segments of constant mean by ruptures' PELT (``model="l2"``, ``min_size=1``): the exact
optimum of the penalised cost, for a number of change points nobody knows in advance, on
series of a few to a few hundred commits. The penalty is ``PENALTY`` x sigma^2 x
max(1, ln n), a BIC-like cost per change point in units of the row's noise per commit,
sigma = the larger of

* the row's calibrated noise margin / ``MARGIN_SIGMAS`` (a margin is the 95th percentile
  of |relative drift| between the medians of two A/A runs, about 2.77 sigma of one
  median; the margin comes from the baseline json, never below ``noise_margin_floor``),
* the series' own robust sigma (MAD of first differences / sqrt 2), so a row noisier
  than its calibration is not cut into noise.

A change point is kept when its size, median after / median before - 1 over the two
segments it separates, is beyond the gate's threshold max(``min_effect``, margin): the
history marks what the gate would call. Its verdict is the gate's own speed call
(``stats.speed_call``: Mann-Whitney and that threshold) on the samples of up to
``WINDOW`` commits on each side, pooled: SLOWER, FASTER or AMBIGUOUS.

Accuracy, per row (``accuracy_steps``): each commit's row judged against the previous
commit's by ``gate.judge_row``: LESS_ACCURATE, or WORSE_ACCURACY where the previous row was
within its bound (a failure that persists is marked where it starts).

``detect_steps`` summarises the row steps per (kind, matrix, path, mode, commit): the rows
that step there, the median size, the worst verdict. Torch-free.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import Settings
from .gate import judge_row
from .history import History, RowKey, RowSeries
from .stats import speed_call
from .verdicts import RANK, Verdict

PENALTY = 3.0
MARGIN_SIGMAS = 1.96 * math.sqrt(2.0)
WINDOW = 5
_ACCURACY = (Verdict.LESS_ACCURATE, Verdict.WORSE_ACCURACY)


@dataclass(frozen=True)
class RowStep:
    """One row's step: at commit ``index`` (the first after it), from ``before`` to ``after``."""

    kind: str                 # "time" (median µs) or "accuracy" (rel_err)
    key: RowKey
    index: int
    before: float
    after: float
    size: float               # after / before - 1
    threshold: float
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Step:
    """The row steps of one (kind, matrix, path, mode) at one commit."""

    kind: str
    matrix: str
    path: str
    mode: str
    index: int
    rows: tuple[RowStep, ...]
    of: int                   # rows of the group

    @property
    def verdict(self) -> Verdict:
        return min((r.verdict for r in self.rows), key=RANK.__getitem__)

    @property
    def size(self) -> float:
        return float(np.median([r.size for r in self.rows]))

    def counts(self) -> str:
        n: dict[Verdict, int] = defaultdict(int)
        for r in self.rows:
            n[r.verdict] += 1
        return ", ".join(f"{v} {k}" for v, k in sorted(n.items(), key=lambda vk: RANK[vk[0]]))


def noise_sigma(x: np.ndarray, margin: float) -> float:
    """The noise of one per-commit value on the log scale (see the module docstring)."""
    sigma = margin / MARGIN_SIGMAS if math.isfinite(margin) else 0.0
    if len(x) >= 3:
        d = np.diff(x)
        sigma = max(sigma, 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2))
    return sigma


def change_points(x: Sequence[float], sigma: float) -> list[int]:
    """Positions j (1..n-1) where a new segment starts in ``x``: PELT, l2 cost, penalty
    ``PENALTY`` x sigma^2 x max(1, ln n)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2 or not sigma > 0:
        return []
    import ruptures  # heavy: it loads scipy.stats/signal (~1 s); only `harness history` needs it

    pen = PENALTY * sigma ** 2 * max(1.0, math.log(len(x)))
    algo = ruptures.Pelt(model="l2", min_size=1, jump=1).fit(x.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=pen)[:-1]]


def _samples(series: RowSeries, indices: Sequence[int]) -> tuple[list[float], float]:
    rows = [r for i in indices for r in series.rows_at(i)]
    samples = [s for r in rows for s in r.samples()]
    med = float(np.median([r.time_us_median for r in rows])) if rows else math.nan
    return samples, med


def time_steps(series: RowSeries, settings: Settings) -> list[RowStep]:
    """The time steps of one row (see the module docstring)."""
    pts = series.per_commit("time_us")
    if len(pts) < 2:
        return []
    idx = [i for i, _ in pts]
    x = np.log([v for _, v in pts])
    cps = change_points(x, noise_sigma(x, series.margin))
    bounds = [0, *cps, len(x)]
    threshold = max(settings.min_effect, series.margin)
    out = []
    for j, b in enumerate(cps, start=1):
        before = float(np.exp(np.median(x[bounds[j - 1]:b])))
        after = float(np.exp(np.median(x[b:bounds[j + 1]])))
        size = after / before - 1.0
        if abs(size) <= threshold:
            continue
        base, base_med = _samples(series, idx[max(bounds[j - 1], b - WINDOW):b])
        cur, cur_med = _samples(series, idx[b:min(bounds[j + 1], b + WINDOW)])
        call = speed_call(base, cur, alpha=settings.alpha, min_effect=settings.min_effect,
                          margin=series.margin, base_median=base_med, cur_median=cur_med)
        verdict = Verdict.SAME if call.call == "NONE" else Verdict(call.call)
        out.append(RowStep("time", series.key, idx[b], before, after, size, threshold, verdict,
                           f"segments {size:+.2%}; pooled samples: {call.reason}"))
    return out


def accuracy_steps(series: RowSeries, settings: Settings) -> list[RowStep]:
    """The accuracy steps of one row (see the module docstring)."""
    at = [(i, rows[0]) for i in sorted({p.index for p in series.points})
          if (rows := series.rows_at(i))]
    out = []
    for (_, base), (i, cur) in zip(at, at[1:], strict=False):
        rv = judge_row(cur, base, settings)
        if rv.verdict not in _ACCURACY:
            continue
        if rv.verdict == Verdict.WORSE_ACCURACY \
                and judge_row(base, None, settings).verdict == Verdict.WORSE_ACCURACY:
            continue                                   # failing before already
        size = cur.rel_err / base.rel_err - 1.0 if base.rel_err > 0 else math.inf
        out.append(RowStep("accuracy", series.key, i, base.rel_err, cur.rel_err, size,
                           settings.rel_err_growth, rv.verdict, rv.reason))
    return out


def detect_steps(history: History, settings: Settings) -> list[Step]:
    """Every step of every row, summarised per (kind, matrix, path, mode, commit)."""
    groups = history.groups()
    found: dict[tuple, list[RowStep]] = defaultdict(list)
    for s in history.series:
        for rs in time_steps(s, settings) + accuracy_steps(s, settings):
            found[(rs.kind, *s.group, rs.index)].append(rs)
    steps = [Step(kind, m, p, mode, i, tuple(rows), len(groups[(m, p, mode)]))
             for (kind, m, p, mode, i), rows in found.items()]
    return sorted(steps, key=lambda s: (s.index, s.matrix, s.path, s.mode, s.kind))


STEP_COLUMNS = ("kind", "commit_index", "commit", "subject", "matrix", "path", "mode", "rows",
                "of", "size_median", "size_min", "size_max", "threshold", "verdict",
                "verdicts", "row_cases")


def steps_frame(steps: Sequence[Step], history: History) -> pd.DataFrame:
    """One line per step (``STEP_COLUMNS``): what ``harness history`` writes as CSV."""
    slots = {s.index: s for s in history.slots}
    recs = []
    for st in steps:
        sizes = [r.size for r in st.rows]
        recs.append({
            "kind": st.kind, "commit_index": st.index, "commit": slots[st.index].sha,
            "subject": slots[st.index].subject, "matrix": st.matrix, "path": st.path,
            "mode": st.mode, "rows": len(st.rows), "of": st.of, "size_median": st.size,
            "size_min": min(sizes), "size_max": max(sizes),
            "threshold": float(np.median([r.threshold for r in st.rows])),
            "verdict": str(st.verdict), "verdicts": st.counts(),
            "row_cases": ";".join(r.key[1] for r in st.rows),
        })
    return pd.DataFrame(recs, columns=list(STEP_COLUMNS))
