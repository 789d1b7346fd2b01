"""The legs of an A/B (``engines.compare``): which bench each round runs, of which rows.

A compare measures one bench per *leg* per round: side B at its revision, side A at its
revision or, where the baseline's rows come from several commits, one part per commit
(``APart``). ``leg_request`` names a leg's bench of a round (its folder under the
compare's ``runs/``, its selection); ``selection`` and ``a_part`` give the selection of
exactly some rows. Every round of a leg runs the same selection (``Leg.selection``); an
extra round of some rows runs it too, restricted to those rows (``BenchRequest.rows``),
so that its bench can be started before the rows are known (``pipeline.HeldBenches``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..reports.verdicts import RowVerdict
from ..results.schema import ResultRow
from ..results.store import Run
from .bench_runner import bench_paths, bench_rows
from .revisions import BenchRequest, case_filter


@dataclass(frozen=True)
class Side:
    spec: str
    label: str
    revision: str = ""          # set when measured here
    run: Run | None = None      # set when read from disk


@dataclass(frozen=True)
class APart:
    """A share of side A measured at a commit of its own, for its own rows: a baseline
    whose rows come from several commits (``harness baseline accept --only-faster``) is
    A/B'd in one compare, each commit's bench measuring that commit's rows in every
    round, the B side measuring all of them (``harness job``'s A/B). ``filter``,
    ``paths``, ``modes`` and ``rows`` select as ``compare``'s own do; ``keys`` are the
    rows' keys (an undecided row's extra rounds go to the part that holds it);
    ``matrices`` the matrices they come from ("": the compare's)."""

    revision: str
    keys: frozenset
    filter: str | None = None
    paths: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    rows: tuple[tuple[str, str], ...] = ()
    matrices: str = ""


@dataclass(frozen=True)
class Leg:
    """One bench per round: a side (or a part of side A) at its revision, in its tree.
    ``whole``: the compare's own selection (matrix, filter, paths, modes, plugins, rows),
    the B side's and a whole A side's."""

    label: str
    side: Side
    tree: Path
    folder: str
    part: APart | None = None
    whole: tuple = ()

    def selection(self) -> tuple:
        """Its benches' selection, ``BenchRequest``'s fields from ``matrix`` to ``rows``."""
        p = self.part
        return (p.matrices or self.whole[0], p.filter, p.paths, p.modes, (), p.rows) \
            if p else self.whole


def leg_request(work_dir: Path, round_name: str, r: int, leg: Leg, sel: tuple,
                late: bool = False) -> BenchRequest:
    """The bench of ``leg`` in round ``r`` (its folder ``round_name``) with selection
    ``sel`` (``Leg.selection``'s fields); ``late``: started before its rows are known."""
    return BenchRequest(leg.label, leg.side.revision, leg.tree,
                        bench_dir(work_dir, round_name, leg.folder), sel[0], r, *sel[1:],
                        late=late)


def a_folders(revisions: Sequence[str]) -> list[str]:
    """The folders of side A's benches in each round: ``A@<sha12>`` per part where A is
    measured in parts (``APart``), else ``A``."""
    return [f"A@{sha[:12]}" for sha in revisions] if revisions else ["A"]


def bench_dir(work_dir: Path, round_name: str, folder: str) -> Path:
    """Where a compare's bench of one round and leg writes its results."""
    return work_dir / "runs" / round_name / folder


def matrices_of(matrix: str, rows: Sequence[ResultRow]) -> str:
    """The matrices of ``matrix`` (comma-separated, as the bench takes them) that ``rows``
    come from: a bench of some rows measures only their matrices (``harness bench``
    refuses a ``--filter`` that selects no case of a matrix it is given: n3 of
    2026-12-06). A row of a matrix not named (a caller's own name) keeps ``matrix``
    whole."""
    names = [m for m in matrix.split(",") if m]
    mine = {r.matrix for r in rows}
    kept = [m for m in names if m in mine]
    return ",".join(kept) if kept and mine <= set(names) else matrix


def selection(rows: Sequence[ResultRow], universe: Sequence[ResultRow]) -> tuple:
    """A bench's selection of exactly ``rows`` (``universe``: the rows their cases come
    from): (filter, paths, modes, plugins, rows), ``BenchRequest``'s fields in order."""
    return (case_filter(rows, universe), tuple(bench_paths({r.path for r in rows})),
            tuple(sorted({r.mode for r in rows})), (), bench_rows(r.key for r in rows))


def a_part(sha: str, rows: list[RowVerdict], universe: list, matrices: list[str],
           broad: tuple | None = None) -> APart:
    """The A side's part at ``sha``: exactly ``rows`` (their baseline rows' commit), on
    the matrices they come from; with ``broad`` ((matrices, paths, modes): the foreign
    A/B's one selection, ``prestart``) those paths and modes on every case of the
    compare's matrices, the rows still exactly ``rows``."""
    current = [v.current for v in rows]
    if broad:
        return APart(sha, frozenset(v.key for v in rows), None, broad[1], broad[2],
                     bench_rows(v.key for v in rows), "")
    filt, paths, modes, _, only = selection(current, universe)
    return APart(sha, frozenset(v.key for v in rows), filt, paths, modes, only,
                 matrices_of(",".join(matrices), current))
