"""The results history of one arch: stored runs placed on the commit line, and per row a
series of times and accuracies over the commits, gaps included with their reasons.

``build_history(line, runs, ...)`` takes the first-parent line (oldest first, as
``harness history`` reads it from git) and the stored runs of the arch
(``results.catalog.stored_runs``), and returns a ``History``: one ``Slot`` per commit
(its runs, none, or several: a ``--repeat`` run, a dirty checkout's run) and one
``RowSeries`` per (matrix, case, path, mode) with a ``Point`` per run of every commit.
A point without a value is a gap that says why, never a zero: no stored run, an
unreadable run, a matrix the run did not measure, a row a filtered run left out (its
filter, paths and modes named), a row that errored, was unavailable or was rejected.

``group_ratios`` is the aggregate the page draws per (matrix, path, mode): per run the
geometric mean, over the rows that have a value there, of each row's ratio to its own
first value on the line. Step detection is ``harness.reports.steps``; the page
``harness.reports.history_html``. Torch-free and git-free.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..results.catalog import StoredRun
from ..results.models import model_slug
from ..results.schema import ResultRow
from ..results.store import Run

#: A row's identity on the line: (matrix, case_id, path, mode).
RowKey = tuple[str, str, str, str]
#: What the page draws a panel of: (matrix, path, mode).
GroupKey = tuple[str, str, str]
NO_RUN = "no stored run of this commit"


@dataclass(frozen=True)
class Slot:
    """One commit of the line and its stored runs (oldest commit: index 0)."""

    index: int
    sha: str
    subject: str
    runs: tuple[StoredRun, ...] = ()

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass(frozen=True)
class Point:
    """One row at one run of one commit: the row, or a gap and why."""

    index: int
    run: str                          # the run's name; "" where the commit has none
    row: ResultRow | None = None
    gap: str = ""

    def value(self, metric: str) -> float:
        """``time_us`` (the median) or ``rel_err``; NaN at a gap or a non-positive value."""
        if self.row is None or self.gap:
            return math.nan
        v = self.row.time_us_median if metric == "time_us" else self.row.rel_err
        return v if math.isfinite(v) and v > 0 else math.nan


@dataclass(frozen=True)
class RowSeries:
    """One row's points over the line, and its noise margin (relative)."""

    matrix: str
    case_id: str
    path: str
    mode: str
    margin: float
    points: tuple[Point, ...]

    @property
    def key(self) -> RowKey:
        return (self.matrix, self.case_id, self.path, self.mode)

    @property
    def group(self) -> GroupKey:
        return (self.matrix, self.path, self.mode)

    def per_commit(self, metric: str) -> list[tuple[int, float]]:
        """(commit index, value) where the commit has one: the median over its runs."""
        by_index: dict[int, list[float]] = defaultdict(list)
        for p in self.points:
            v = p.value(metric)
            if math.isfinite(v):
                by_index[p.index].append(v)
        return [(i, float(np.median(vs))) for i, vs in sorted(by_index.items())]

    def rows_at(self, index: int) -> list[ResultRow]:
        """The ok rows of this series at commit ``index`` (one per run)."""
        return [p.row for p in self.points
                if p.index == index and p.row is not None and not p.gap]


@dataclass(frozen=True)
class History:
    """Every stored run of ``arch`` on the line, as series per row."""

    arch: str
    slots: tuple[Slot, ...]
    series: tuple[RowSeries, ...]
    off_line: tuple[StoredRun, ...] = ()   # runs of commits that are not on the line
    trimmed: int = 0                       # older commits of the window without any run

    def groups(self) -> dict[GroupKey, list[RowSeries]]:
        out: dict[GroupKey, list[RowSeries]] = defaultdict(list)
        for s in self.series:
            out[s.group].append(s)
        return dict(sorted(out.items()))

    @property
    def runs(self) -> int:
        return sum(len(s.runs) for s in self.slots)


def _match(line: Sequence[tuple[str, str]], runs: Sequence[StoredRun]):
    by_slot: dict[int, list[StoredRun]] = defaultdict(list)
    off: list[StoredRun] = []
    for run in runs:
        hits = [i for i, (sha, _) in enumerate(line) if sha.startswith(run.commit)]
        if len(hits) == 1:
            by_slot[hits[0]].append(run)
        else:
            off.append(run)
    return by_slot, off


def _measured_with(run: Run, matrix: str) -> str:
    meta = run.metas.get(matrix)
    if meta is None:
        return ""
    parts = []
    if meta.extra.get("filter"):
        parts.append(f"filter {meta.extra['filter']!r}")
    for name in ("paths", "modes"):
        value = meta.extra.get(name)
        if isinstance(value, list) and value:
            parts.append(f"{name} {','.join(map(str, value))}")
    return f" ({'; '.join(parts)})" if parts else ""


def _point(index: int, stored: StoredRun, key: RowKey, rows: Mapping[tuple, ResultRow]) -> Point:
    matrix = key[0]
    if stored.run is None:
        return Point(index, stored.name, gap=f"unreadable run: {stored.problem}")
    if matrix not in stored.run.matrices:
        return Point(index, stored.name, gap=f"matrix {matrix} not in this run")
    row = rows.get(key)
    if row is None:
        how = _measured_with(stored.run, matrix)
        return Point(index, stored.name, gap=(
            f"not measured in this run{how}" if how else
            "absent from this run (its other rows are there: an interrupted or partial run)"))
    if row.status != "ok":
        return Point(index, stored.name, row, gap=f"{row.status}: {row.error or 'no reason'}")
    if not (math.isfinite(row.time_us_median) and row.time_us_median > 0):
        return Point(index, stored.name, row, gap="ok row without a timing")
    return Point(index, stored.name, row)


def build_history(
    line: Sequence[tuple[str, str]], runs: Sequence[StoredRun], *, arch: str,
    margins: Mapping[RowKey, float] | None = None, floor: float = 0.01,
    matrices: Sequence[str] = (), paths: Sequence[str] = (), modes: Sequence[str] = (),
    trim: bool = True,
) -> History:
    """Place ``runs`` on ``line`` ((sha, subject), oldest first) and build every row's series.

    ``margins``: per row its calibrated noise margin (a baseline json's), never below
    ``floor``; ``matrices``/``paths``/``modes`` keep only those (empty: all). ``trim`` drops
    the commits older than the first one with a stored run (counted in ``trimmed``).
    """
    by_slot, off = _match(line, runs)
    first = min(by_slot) if (trim and by_slot) else 0
    slots = tuple(Slot(i - first, sha, subject, tuple(by_slot.get(i, ())))
                  for i, (sha, subject) in enumerate(line) if i >= first)
    rows: dict[Path, dict[tuple, ResultRow]] = {}      # per run directory
    keys: dict[RowKey, None] = {}
    for slot in slots:
        for stored in slot.runs:
            index = {}
            for r in (stored.run.rows if stored.run is not None else ()):
                if r.kind == "ppl" or (matrices and r.matrix not in matrices) \
                        or (paths and r.path not in paths) or (modes and r.mode not in modes):
                    continue
                key = (r.matrix, r.case_id, r.path, r.mode)
                index[key] = r
                keys.setdefault(key)
            rows[stored.path] = index
    margins = margins or {}
    series = []
    for key in sorted(keys):
        points = []
        for slot in slots:
            if not slot.runs:
                points.append(Point(slot.index, "", gap=NO_RUN))
            points += [_point(slot.index, stored, key, rows[stored.path]) for stored in slot.runs]
        margin = max(floor, margins.get(key, 0.0))
        series.append(RowSeries(*key, margin=margin, points=tuple(points)))
    return History(arch, slots, tuple(series), tuple(off), first)


@dataclass(frozen=True)
class GroupPoint:
    """The aggregate of a group at one run: geometric mean of per-row ratios."""

    index: int
    run: str
    ratio: float
    rows: int                 # rows with a value at this run
    of: int                   # rows of the group


def group_ratios(series: Sequence[RowSeries], metric: str) -> list[GroupPoint]:
    """Per run the geometric mean of each row's ``metric`` over its first per-commit value
    (``per_commit``), over the rows that have one there; runs where none has are gaps
    (ratio NaN, rows 0)."""
    refs = {}
    for s in series:
        first = s.per_commit(metric)
        if first:
            refs[s.key] = first[0][1]
    logs: dict[tuple[int, str], list[float]] = defaultdict(list)
    for s in series:
        for p in s.points:
            logs.setdefault((p.index, p.run), [])
            v = p.value(metric)
            if s.key in refs and math.isfinite(v):
                logs[(p.index, p.run)].append(math.log(v / refs[s.key]))
    return [GroupPoint(i, run, math.exp(float(np.mean(v))) if v else math.nan, len(v),
                       len(series))
            for (i, run), v in sorted(logs.items())]


def run_model(run: StoredRun) -> str:
    """The GPU model a stored run was measured on ("" when unreadable or unknown)."""
    return run.run.environment.gpu_name if run.run is not None else ""


def one_model(runs: Sequence[StoredRun], wanted: str | None = None
              ) -> tuple[str, list[StoredRun], dict[str, int]]:
    """The runs of one GPU model, to be drawn on one time axis: ``wanted`` (a GPU name or
    its folder slug, ``results.models.model_slug``), else the model with the most runs
    (ties: the first by name); unreadable runs stay (they are gaps). Returns (the model,
    its runs, the other models with their run counts), so a page never draws two models'
    times on one axis and says which it left out."""
    counts: dict[str, int] = {}
    for r in runs:
        if run_model(r):
            counts[run_model(r)] = counts.get(run_model(r), 0) + 1
    if wanted:
        model = next((m for m in counts if model_slug(m) == model_slug(wanted)), "")
        if not model:
            raise ValueError(f"--model {wanted!r}: no stored run of that GPU model (models: "
                             f"{', '.join(sorted(counts)) or 'none'})")
    else:
        model = min(counts, key=lambda m: (-counts[m], m)) if counts else ""
    kept = [r for r in runs if not run_model(r) or model_slug(run_model(r)) == model_slug(model)]
    others = {m: n for m, n in sorted(counts.items()) if model_slug(m) != model_slug(model)}
    return model, kept, others
