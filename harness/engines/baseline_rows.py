"""Which rows a filtered re-baseline takes: ``harness baseline accept|record`` with
``--only-faster`` and/or ``--paths P1,P2``.

A kernel engineer who made one path faster re-baselines those rows only, so that a
slowdown elsewhere cannot slip into the baseline along with the speed-up. Per key
(case, path, mode), judged by the gate (``harness.reports.gate.evaluate``) of the new
row against the previous baseline with the previous baseline's noise margins:

* ``--only-faster``: the new row replaces the previous one only where its verdict is
  FASTER; a key the previous baseline lacks is added (nothing to protect);
* ``--paths``: only rows of these paths are replaced or added (with ``--only-faster``:
  their FASTER rows);
* every other key keeps the previous baseline's row exactly as it was (the same
  ``ResultRow``, its own ``commit`` included), and so does a key the new run lacks.

The kept rows are counted by verdict, and the kept SLOWER keys are listed: a user must
see that a regression was not baselined. Either option needs a previous baseline
(one-line error naming the matrix and the directory otherwise), and ``--paths`` names
paths that the run or the previous baseline holds (one-line error otherwise).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HarnessError
from ..reports.verdicts import GateResult, RowVerdict, Verdict
from ..results.baseline import BaselineMeta, BaselineNotFoundError, read_baseline_matrix
from ..results.models import MODELS_DIR, reference_model, target_dir
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import Run

#: The verdicts the summary always counts among the kept rows (others when present).
SHOWN_KEPT = (Verdict.SAME, Verdict.SLOWER, Verdict.AMBIGUOUS)


@dataclass(frozen=True)
class RowFilter:
    """What a re-baseline may take from the new rows (nothing filtered by default)."""

    only_faster: bool = False
    paths: tuple[str, ...] = ()      # () = every path

    @property
    def active(self) -> bool:
        """True when some row may keep the previous baseline's."""
        return self.only_faster or bool(self.paths)

    def describe(self) -> str:
        """The options as typed, e.g. ``--only-faster --paths marlin_asym``."""
        return " ".join(([] if not self.only_faster else ["--only-faster"])
                        + ([f"--paths {','.join(self.paths)}"] if self.paths else []))

    def takes_path(self, path: str) -> bool:
        """Whether rows of ``path`` may be replaced or added."""
        return not self.paths or path in self.paths


def previous_baselines(
    directory: Path, matrices: Iterable[str], filt: RowFilter, new_paths: Iterable[str],
) -> dict[str, tuple[list[ResultRow], BaselineMeta]]:
    """The previous baseline of each of ``matrices`` in ``directory``, which a filtered
    re-baseline keeps rows of; one-line errors when one is missing or unreadable, or when
    ``filt.paths`` names a path that neither ``new_paths`` nor those baselines hold."""
    out: dict[str, tuple[list[ResultRow], BaselineMeta]] = {}
    for matrix in matrices:
        try:
            out[matrix] = read_baseline_matrix(directory, matrix)
        except BaselineNotFoundError:
            raise BaselineNotFoundError(
                f"{matrix}: {filt.describe()} keeps rows of the previous baseline, and "
                f"{directory} holds none for matrix {matrix!r}; promote a whole run first "
                "(without the option)") from None
        except SchemaError as exc:
            raise SchemaError(f"{matrix}: {filt.describe()} needs a readable previous "
                              f"baseline: {exc}") from None
    known = set(new_paths) | {r.path for rows, _ in out.values() for r in rows}
    unknown = [p for p in filt.paths if p not in known]
    if unknown:
        raise HarnessError(f"--paths: no rows of {', '.join(unknown)} in the run or the "
                           f"previous baseline in {directory} (paths there: "
                           f"{', '.join(sorted(known)) or 'none'})")
    return out


@dataclass(frozen=True)
class Selection:
    """The rows a filtered re-baseline writes for one matrix, and where each came from."""

    matrix: str
    rows: tuple[ResultRow, ...]
    #: verdict -> new rows that replaced a previous one
    replaced: Mapping[Verdict, int] = field(default_factory=dict)
    #: verdict -> new rows of keys the previous baseline lacked
    added: Mapping[Verdict, int] = field(default_factory=dict)
    #: verdict -> previous rows kept on their verdict (rows of other paths not counted)
    kept: Mapping[Verdict, int] = field(default_factory=dict)
    other_paths: int = 0         # previous rows kept because their path is not in --paths
    left_out: int = 0            # new keys of other paths, not added
    #: kept keys whose new row read SLOWER (the regression NOT baselined), with the change
    kept_slower: tuple[tuple[Key, float], ...] = ()

    @property
    def n_new(self) -> int:
        """Rows taken from the new run."""
        return sum(self.replaced.values()) + sum(self.added.values())

    @property
    def n_kept(self) -> int:
        """Rows kept from the previous baseline."""
        return sum(self.kept.values()) + self.other_paths

    def summary(self) -> str:
        """One line, e.g. ``production: 55 rows replaced (FASTER 55), 0 added, 169 kept
        (SAME 160, SLOWER 0, AMBIGUOUS 9, other paths 0)``."""
        kept = [f"{v} {self.kept.get(v, 0)}" for v in SHOWN_KEPT]
        kept += [f"{v} {n}" for v, n in self.kept.items() if v not in SHOWN_KEPT and n]
        line = (f"{self.matrix}: {sum(self.replaced.values())} rows replaced"
                f"{_counts(self.replaced)}, {sum(self.added.values())} added"
                f"{_counts(self.added)}, {self.n_kept} kept ({', '.join(kept)}, "
                f"other paths {self.other_paths})")
        if self.left_out:
            line += f", {self.left_out} new rows of other paths not added"
        return line

    def lines(self) -> list[str]:
        """The summary, then each kept SLOWER key (a slowdown that was not baselined)."""
        out = [self.summary()]
        if self.kept_slower:
            out.append(f"{self.matrix}: {len(self.kept_slower)} SLOWER row(s) kept at the "
                       "previous baseline (the slowdown is NOT in the new baseline):")
            out += [f"  {' '.join(k)} {change:+.2%}" for k, change in self.kept_slower]
        return out

    def source(self, new: str, old: str) -> str:
        """The baseline json's ``source``: which rows came from where."""
        taken = Counter(self.replaced) + Counter(self.added)
        what = ", ".join(f"{v} {n}" for v, n in sorted(taken.items(), key=lambda vn: vn[0].value))
        return (f"{self.n_new} rows ({what or 'none'}) of {new}; "
                f"{self.n_kept} rows kept from {old or 'the previous baseline'}")


def _counts(counts: Mapping[Verdict, int]) -> str:
    shown = [f"{v} {n}" for v, n in counts.items() if n]
    return f" ({', '.join(shown)})" if shown else ""


def _takes(v: RowVerdict, filt: RowFilter) -> bool:
    return (v.current is not None and filt.takes_path(v.path)
            and (not filt.only_faster or v.verdict == Verdict.FASTER))


def select_rows(matrix: str, result: GateResult, new_rows: Sequence[ResultRow],
                old_rows: Sequence[ResultRow], filt: RowFilter) -> Selection:
    """The rows of ``matrix`` to write: ``result`` is the gate of ``new_rows`` against
    ``old_rows`` (one matrix each). The previous baseline's order is kept, each key's row
    replaced in place; keys it lacks follow in the new run's order."""
    by_key = {v.key: v for v in result.verdicts}
    replaced: Counter = Counter()
    added: Counter = Counter()
    kept: Counter = Counter()
    other_paths = left_out = 0
    slower: list[tuple[Key, float]] = []
    rows: list[ResultRow] = []
    for old in old_rows:
        v = by_key[old.key]          # the gate judges every key of either side
        if _takes(v, filt):
            rows.append(v.current)
            replaced[v.verdict] += 1
            continue
        rows.append(old)
        if v.verdict == Verdict.SLOWER:
            slower.append((old.key, v.time_change))
        if filt.takes_path(old.path):
            kept[v.verdict] += 1
        else:
            other_paths += 1
    have = {r.key for r in old_rows}
    for new in new_rows:
        if new.key in have:
            continue
        if not filt.takes_path(new.path):
            left_out += 1
            continue
        rows.append(new)
        added[by_key[new.key].verdict] += 1
    return Selection(matrix, tuple(rows), dict(replaced), dict(added), dict(kept),
                     other_paths, left_out, tuple(slower))


def where_to(root: str | Path, arch: str, run: Run, reference: bool,
             echo: Callable[[str], None]) -> Path:
    """The folder ``accept`` / ``record`` write the baseline of ``run``'s GPU model to
    (``results.models.target_dir``), said in one line when it is a model's own."""
    gpu_name = run.environment.gpu_name or next(
        (r.device_name for r in run.rows if r.device_name), "")
    directory = target_dir(root, arch, gpu_name, reference=reference)
    if directory.parent.name == MODELS_DIR:
        echo(f"{gpu_name!r} is not {arch}'s reference model "
             f"({reference_model(Path(root) / arch)!r}): its baseline goes to {directory} "
             "(--reference makes it the arch's reference instead)")
    return directory
