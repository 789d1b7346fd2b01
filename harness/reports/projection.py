"""Speed on a GPU model the baseline was not recorded on: the machine factor (pure part).

A baseline of another model of the arch (an H200's rows judged on an H100, an L4's on an
RTX 4090) cannot be compared time for time: the models differ by a factor that is not one
number (memory-bound decode moves with bandwidth, compute-bound M = 1024 with the tensor
cores, a scalar kernel with neither) and by a per-row part (cuBLAS picks other kernels).
``harness job`` therefore judges such a run on the runner itself
(``harness.engines.ab_step``):

1. **the machine factor, measured here**: per *class* of gated rows, (path, mode, M
   bucket: ``M_EDGES``), ``per_class`` rows (``pick_sample``: spread over the class's
   baseline times) are measured on this runner at the commit their baseline row was
   measured at; the class's factor is the median of (measured here / stored)
   (``machine_factors``). Measured on the baseline's commit, not taken from the run
   itself, so a path that moved as a whole is not absorbed into its own factor;
2. **the projection**: every gated row's baseline scaled by its class's factor, and for
   the rows measured here, that measurement itself (``projected_baseline``);
3. **the screen** (``reports.ab_confirm.screen`` against the projection, ``both_ways``): a
   row that moved beyond ``ab_screen``, slower or faster, and every row of a (path, mode)
   whose median moved beyond it, is measured A/B against the baseline's commit on the
   runner, and that reading is its verdict (SLOWER, SAME or FASTER); every other gated row
   reads SAME, its change against the projection recorded
   (``Projection``, stored in the run's A/B record so ``harness report`` replays it).

A class whose sample could not be measured has no factor: its rows stay
TIMING_NOT_COMPARABLE. Rows that do not gate speed (eager ``cold`` rows, peers, model
forwards) are not projected: their times are information on any model.

Extension point: ``M_EDGES`` (the class boundaries) and ``class_of``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..config import Settings
from ..results.schema import Key, ResultRow
from .gate import row_fails
from .stats import median
from .verdicts import GateResult, RowVerdict, Verdict

#: M bucket boundaries of a class: decode (M <= 16: weight bytes dominate), mid, and the
#: compute-bound prefill rows above 256.
M_EDGES = (16, 256)
#: ``ABRow.source`` of a row judged against the projection alone (no A/B of its own).
PROJECTED = "projected"
#: ``ABRow.source`` of a screened row whose A/B gave no reading: the screen's verdict stands
SCREENED = "screened"
#: ``ABRow.source`` of a screened row whose A/B called the other direction than the one the
#: screen sent it for (sent as faster, read SLOWER, or the reverse): two readings of one
#: commit pair that disagree in sign are the spread between processes, not a change; SAME
CONTRADICTED = "contradicted"


def m_bucket(m: int) -> str:
    """``'M<=16'``, ``'M<=256'`` or ``'M>256'`` (``M_EDGES``)."""
    for edge in M_EDGES:
        if m <= edge:
            return f"M<={edge}"
    return f"M>{M_EDGES[-1]}"


def class_of(row: ResultRow) -> str:
    """A row's class for the machine factor: ``path|mode|M bucket``."""
    return f"{row.path}|{row.mode}|{m_bucket(row.M)}"


def judged_rows(result: GateResult, settings: Settings) -> list[RowVerdict]:
    """The TIMING_NOT_COMPARABLE rows whose speed gates (a path's row in a gating mode,
    both sides ``ok`` with a finite median): the rows a projection judges."""
    out = []
    for v in result.verdicts:
        c, b = v.current, v.baseline
        if (v.verdict == Verdict.TIMING_NOT_COMPARABLE and c is not None and b is not None
                and c.status == "ok" and b.status == "ok"
                and math.isfinite(c.time_us_median) and math.isfinite(b.time_us_median)
                and b.time_us_median > 0
                and row_fails(Verdict.SLOWER, c.role, c.mode, settings)):
            out.append(v)
    return out


def pick_sample(verdicts: Sequence[RowVerdict], per_class: int) -> list[RowVerdict]:
    """Up to ``per_class`` rows of each class, spread evenly over the class's rows sorted
    by baseline time (the fastest and slowest included from 2 up); deterministic.
    ``per_class`` 0 (or less): every row."""
    by_class: dict[str, list[RowVerdict]] = defaultdict(list)
    for v in verdicts:
        by_class[class_of(v.current)].append(v)
    out = []
    for cls in sorted(by_class):
        rows = sorted(by_class[cls], key=lambda v: (v.baseline.time_us_median, v.case_id))
        n = len(rows)
        if per_class <= 0 or per_class >= n:
            out += rows
            continue
        if per_class == 1:
            out.append(rows[n // 2])
            continue
        picks = sorted({round(i * (n - 1) / (per_class - 1)) for i in range(per_class)})
        out += [rows[i] for i in picks]
    return out


def machine_factors(verdicts: Sequence[RowVerdict],
                    measured: Mapping[Key, ResultRow]) -> dict[str, float]:
    """Per class, the median of (measured here / stored baseline) over its rows in
    ``measured`` (the baseline's commit on this runner); classes without one are absent."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for v in verdicts:
        m = measured.get(v.key)
        if (m is not None and m.status == "ok" and math.isfinite(m.time_us_median)
                and m.time_us_median > 0):
            ratios[class_of(v.current)].append(m.time_us_median / v.baseline.time_us_median)
    return {cls: median(r) for cls, r in sorted(ratios.items())}


def scaled(row: ResultRow, factor: float) -> ResultRow:
    """``row`` with every time multiplied by ``factor`` (samples, median, CI, IQR)."""
    return replace(
        row, time_us_median=row.time_us_median * factor, time_us_iqr=row.time_us_iqr * factor,
        time_us_ci_lo=row.time_us_ci_lo * factor, time_us_ci_hi=row.time_us_ci_hi * factor,
        samples_us=";".join(f"{s * factor:.6g}" for s in row.samples()))


def projected_baseline(verdicts: Sequence[RowVerdict], factors: Mapping[str, float],
                       measured: Mapping[Key, ResultRow]) -> list[ResultRow]:
    """The baseline each judged row is screened against on this runner: the row measured
    here at its baseline commit where there is one, else its stored row scaled by its
    class's factor; rows of a class without a factor are left out."""
    out = []
    for v in verdicts:
        m = measured.get(v.key)
        if m is not None and m.status == "ok" and math.isfinite(m.time_us_median):
            out.append(replace(m, matrix=v.baseline.matrix))
        elif class_of(v.current) in factors:
            out.append(scaled(v.baseline, factors[class_of(v.current)]))
    return out


@dataclass(frozen=True)
class Projection:
    """How a foreign model's run was projected (stored in the matrix's A/B record):
    both models, the factor of each class, the sample's size per class and the keys
    measured here."""

    reference_model: str
    runner_model: str
    factors: Mapping[str, float] = field(default_factory=dict)
    per_class: int = 0
    measured: tuple[str, ...] = ()         # "case|path|mode" of the rows measured here

    def factor_text(self, row: ResultRow) -> str:
        """How ``row``'s baseline was projected, in words."""
        key = "|".join(row.key)
        if key in self.measured:
            return "its baseline commit measured on this runner"
        f = self.factors.get(class_of(row))
        if f is None:
            return "no machine factor"
        return f"the machine factor x{f:.3f} of {class_of(row)}"

    def factors_text(self) -> str:
        """The machine factors in a few words: how many classes, their span, from what."""
        span = (f"x{min(self.factors.values()):.3f}-x{max(self.factors.values()):.3f}"
                if self.factors else "none")
        return (f"machine factors of {len(self.factors)} classes ({span}) from "
                f"{len(self.measured)} rows of the baseline's commit measured here")

    def note(self) -> str:
        """The report header's line: how speed was judged."""
        return (f"speed judged on this runner: GPU model {self.runner_model!r}, baseline "
                f"recorded on {self.reference_model!r}; {self.factors_text()} "
                "(docs/measurement.md §16)")

    def to_dict(self) -> dict:
        return {"reference_model": self.reference_model, "runner_model": self.runner_model,
                "factors": dict(self.factors), "per_class": self.per_class,
                "measured": list(self.measured)}

    @classmethod
    def from_dict(cls, d: Mapping) -> Projection:
        """Parse a stored projection (a malformed one raises ``KeyError``/``TypeError``/
        ``ValueError``, which the record's parser turns into one line)."""
        return cls(str(d["reference_model"]), str(d["runner_model"]),
                   {str(k): float(v) for k, v in dict(d["factors"]).items()},
                   int(d.get("per_class", 0)), tuple(str(k) for k in d.get("measured", ())))


def projected_readings(current: Sequence[ResultRow], projected: Sequence[ResultRow],
                       skip: set[Key]) -> dict[Key, tuple[str, float]]:
    """Per judged row not in ``skip`` (the rows sent to A/B): (SAME, its change against
    the projection), the reading a row inside the screen gets."""
    base = {r.key: r for r in projected}
    out = {}
    for c in current:
        b = base.get(c.key)
        if c.key in skip or b is None or not b.time_us_median > 0:
            continue
        out[c.key] = (Verdict.SAME.value, c.time_us_median / b.time_us_median - 1.0)
    return out
