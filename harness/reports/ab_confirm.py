"""Same-machine A/B confirmation of a SLOWER row: the record and how it changes a verdict.

A stored baseline was measured on another machine. Between two H200s of one model the
graph-mode medians of an unchanged build differ per row by ~0.8% (sd), on top of
0.35-0.7% between processes of one machine (docs/measurement.md §9): margins wide
enough to hold that at a coverage of 0.999 cannot also catch a 5% slowdown on 95% of the
rows. An A/B run removes the machine from the comparison: the baseline's own commit and
the current one are measured here, interleaved, in git worktrees (``harness compare``),
and only their difference is judged.

``harness job --ab-confirm`` does it for the rows the stored-baseline gate failed as
SLOWER. This module is the pure part, shared by the job (which measures) and by
``harness report`` / ``harness merge`` (which replay it from the run's json):

* ``ABRecord``: the baseline commit, the commit measured against it, the rounds, and per
  row the A/B verdict and median change; stored in ``<matrix>.json`` under
  ``ab_confirm``;
* ``apply_ab(result, record)``: a failing SLOWER row whose A/B verdict is SLOWER stays
  (the A/B evidence added to its reasons), and so does one whose A/B reading is not
  usable (AMBIGUOUS, MISSING, ERROR); an A/B SAME or FASTER clears it to SAME, its
  reasons saying what A/B read. Rows without an A/B record are untouched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .gate import _order
from .verdicts import GateResult, Verdict

AB_KEY = "ab_confirm"
#: A/B verdicts that clear a stored-baseline SLOWER; any other (SLOWER, AMBIGUOUS,
#: MISSING, ERROR, ...) leaves the row failing
CLEARING = (Verdict.SAME.value, Verdict.FASTER.value)
AB_RECORD_VERSION = 1


@dataclass(frozen=True)
class ABRow:
    """One row's same-machine A/B reading: ``verdict`` of the current commit against the
    baseline's commit, ``change`` = current / baseline - 1 of the pooled medians."""

    case_id: str
    path: str
    mode: str
    verdict: str
    change: float

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case_id, self.path, self.mode)


@dataclass(frozen=True)
class ABRecord:
    """The A/B confirmation of one matrix of a run (see the module docstring)."""

    matrix: str
    baseline_commit: str
    current_commit: str
    rounds: int
    rows: tuple[ABRow, ...]
    version: int = AB_RECORD_VERSION

    def to_dict(self) -> dict:
        return {"version": self.version, "matrix": self.matrix,
                "baseline_commit": self.baseline_commit,
                "current_commit": self.current_commit, "rounds": self.rounds,
                "rows": {"|".join(r.key): {"verdict": r.verdict,
                                           "change": r.change if math.isfinite(r.change)
                                           else None}
                         for r in self.rows}}

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "<ab_confirm>") -> ABRecord:
        """Parse a stored record; a malformed one raises ``ValueError`` naming ``source``."""
        try:
            rows = []
            for key, v in dict(d["rows"]).items():
                case_id, path, mode = key.split("|")
                change = v.get("change")
                rows.append(ABRow(case_id, path, mode, str(v["verdict"]),
                                  math.nan if change is None else float(change)))
            return cls(str(d["matrix"]), str(d["baseline_commit"]), str(d["current_commit"]),
                       int(d["rounds"]), tuple(rows), int(d.get("version", AB_RECORD_VERSION)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{source}: malformed '{AB_KEY}' record ({exc})") from None


def stored_ab(meta) -> ABRecord | None:
    """The A/B record a run's matrix json holds (``RunMeta.extra``), or None."""
    raw = getattr(meta, "extra", {}).get(AB_KEY)
    return ABRecord.from_dict(raw, getattr(meta, "matrix", AB_KEY)) if raw else None


def apply_ab(result: GateResult, record: ABRecord | None) -> GateResult:
    """``result`` with its failing SLOWER rows confirmed or cleared by ``record``."""
    if record is None or not record.rows:
        return result
    by_key = {r.key: r for r in record.rows}
    against = f"A/B on this machine, {record.rounds} interleaved round(s), against " \
              f"{record.baseline_commit[:12]}"
    out, cleared, kept = [], 0, 0
    for v in result.verdicts:
        ab = by_key.get(v.key) if v.matrix == record.matrix else None
        if ab is None or v.verdict != Verdict.SLOWER or not v.fails:
            out.append(v)
            continue
        said = f"{against}: {ab.change:+.2%} ({ab.verdict})"
        if ab.verdict not in CLEARING:        # SLOWER, or no usable A/B reading
            how = "confirmed by" if ab.verdict == Verdict.SLOWER.value else "not cleared by"
            out.append(replace(v, reasons=v.reasons + (f"{how} {said}",)))
            kept += 1
        else:
            out.append(replace(v, verdict=Verdict.SAME, fails=False,
                               reasons=v.reasons + (f"cleared by {said}: the stored "
                                                    "baseline's offset is the machine's",)))
            cleared += 1
    note = (f"{against}: {kept} SLOWER row(s) kept, {cleared} cleared "
            f"(docs/measurement.md §9)")
    return replace(result, verdicts=tuple(sorted(out, key=_order)),
                   notes=result.notes + (note,))
