"""The history page's plots: per (matrix, path, mode), time and accuracy over the commits.

``group_plot`` draws two panels as one inline SVG (``plots.svg_text``): left, each row's
median over its first value on the line (thin lines, up to ``MAX_ROW_LINES`` rows) and
the group's geometric mean (thick, one marker per stored run: a commit with two runs
shows two), inside the noise band (grey: +- the rows' median noise margin); right, the
same for rel_err, inside +- ``rel_err_growth`` (the LESS_ACCURATE tolerance). A commit
without a value is a gap in the lines with a grey x at the bottom (its reason is in the
page's gap table), never a zero. Steps are dashed vertical lines before their commit,
coloured by verdict and labelled with their size.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from .history import GroupKey, History, RowSeries, group_ratios
from .plots import Plot, new_figure, svg_text
from .steps import Step
from .verdicts import Verdict

MAX_ROW_LINES = 12
MAX_TICKS = 30
STEP_COLOURS = {Verdict.SLOWER: "#c62828", Verdict.FASTER: "#2e7d32",
                Verdict.AMBIGUOUS: "#c49000", Verdict.LESS_ACCURATE: "#d84315",
                Verdict.WORSE_ACCURACY: "#b71c1c"}


def _offsets(points) -> dict[tuple[int, str], float]:
    """x of each (commit, run): the commit's index, runs of one commit spread by 0.12."""
    runs: dict[int, list[str]] = defaultdict(list)
    for p in points:
        if p.run not in runs[p.index]:
            runs[p.index].append(p.run)
    out = {}
    for i, names in runs.items():
        for j, name in enumerate(names):
            out[(i, name)] = i + (j - (len(names) - 1) / 2) * 0.12
    return out


def _panel(ax, history: History, series: Sequence[RowSeries], steps: Sequence[Step],
           metric: str, band: float, ylabel: str) -> None:
    n = len(history.slots)
    ax.axhspan(1 - band, 1 + band, color="#9e9e9e", alpha=0.18, lw=0,
               label=f"noise band ±{band:.1%}")
    ax.axhline(1.0, color="#757575", lw=0.6)
    if len(series) <= MAX_ROW_LINES:
        for s in series:
            values = dict(s.per_commit(metric))
            if not values:
                continue
            ref = next(iter(values.values()))
            y = [values.get(i, math.nan) / ref for i in range(n)]
            ax.plot(range(n), y, lw=0.7, alpha=0.45, marker=".", ms=2)
    agg = group_ratios(series, metric)
    xs = _offsets(agg)
    per_commit: dict[int, list[float]] = defaultdict(list)
    for g in agg:
        if math.isfinite(g.ratio):
            per_commit[g.index].append(g.ratio)
    line = [float(np.exp(np.mean(np.log(per_commit[i])))) if per_commit.get(i) else math.nan
            for i in range(n)]
    ax.plot(range(n), line, color="#1a237e", lw=1.8, label="geometric mean over rows")
    good = [g for g in agg if math.isfinite(g.ratio)]
    ax.plot([xs[(g.index, g.run)] for g in good], [g.ratio for g in good], ls="none",
            marker="o", ms=4, color="#1a237e")
    gaps = sorted({g.index for g in agg} - {g.index for g in good})
    if gaps:
        ax.plot(gaps, [0.03] * len(gaps), ls="none", marker="x", ms=6, color="#616161",
                transform=ax.get_xaxis_transform(), label="gap (reason in the table)")
    for st in steps:
        colour = STEP_COLOURS.get(st.verdict, "#757575")
        ax.axvline(st.index - 0.5, color=colour, ls="--", lw=1.2)
        ax.text(st.index - 0.45, 0.97, f"{st.verdict} {st.size:+.1%}", color=colour, fontsize=7,
                va="top", rotation=90, transform=ax.get_xaxis_transform())
    step = max(1, math.ceil(n / MAX_TICKS))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks, [history.slots[i].short[:8] for i in ticks], rotation=60, fontsize=6,
                  ha="right")
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(True, alpha=0.25)
    ax.legend(fontsize=6, loc="upper left")


def group_plot(history: History, group: GroupKey, series: Sequence[RowSeries],
               steps: Sequence[Step], rel_err_growth: float) -> Plot:
    """Time and accuracy of one (matrix, path, mode) over the line (module docstring)."""
    matrix, path, mode = group
    key = f"history-{matrix}-{path}-{mode}"
    title = f"{matrix} · {path} · {mode} ({len(series)} rows)"
    if not any(s.per_commit("time_us") for s in series):
        return Plot(key, title, None, "no row of this group has a value on the line")
    band = float(np.median([s.margin for s in series]))
    fig = new_figure(figsize=(11.5, 3.6))
    left, right = fig.subplots(1, 2)
    _panel(left, history, series, [s for s in steps if s.kind == "time"], "time_us", band,
           "median time / first on the line")
    left.set_title("time", fontsize=9)
    _panel(right, history, series, [s for s in steps if s.kind == "accuracy"], "rel_err",
           rel_err_growth, "rel_err / first on the line")
    right.set_title("accuracy (rel_err vs float64)", fontsize=9)
    return Plot(key, title, svg_text(fig, key))
