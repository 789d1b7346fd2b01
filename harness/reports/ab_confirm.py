"""Same-machine A/B confirmation of a SLOWER row: the record and how it changes a verdict.

A stored baseline was measured on another machine. Between two H200s of one model the
graph-mode medians of an unchanged build differ per row by ~0.8% (sd), on top of
0.35-0.7% between processes of one machine (docs/measurement.md §9): margins wide
enough to hold that at a coverage of 0.999 cannot also catch a 5% slowdown on 95% of the
rows. An A/B run removes the machine from the comparison: the baseline's own commit and
the current one are measured here, interleaved, in git worktrees (``harness compare``),
and only their difference is judged.

``harness job`` does it (``harness.engines.ab_step``) for the rows the stored-baseline
gate failed as SLOWER and for the gated rows that moved beyond the ``ab_screen`` setting
inside their margin. This module is the pure part, shared by the job (which measures) and
by ``harness report`` / ``harness compare`` / ``harness merge`` (which replay it from the
run's json):

* ``ABRecord``: the baseline commit, the commit measured against it, the rounds, and per
  row the A/B verdict and median change; stored in ``<matrix>.json`` under
  ``ab_confirm``;
* ``apply_ab(result, record)``: a failing SLOWER row whose A/B verdict is SLOWER stays
  (the A/B evidence added to its reasons), and so does one whose A/B reading is not
  usable (AMBIGUOUS, MISSING, ERROR); an A/B SAME or FASTER clears it to SAME, its
  reasons saying what A/B read. A SAME row (inside its cross-machine margin) that A/B
  reads SLOWER becomes a failing SLOWER ("found by the A/B screen"); with any other A/B
  reading it stays SAME, the reading added to its reasons. Rows without an A/B record
  are untouched;
* ``record_for(meta, baseline_commit)``: the stored record, only when it was measured
  against that baseline's commit (another baseline gets the plain gate).

On a GPU model the baseline was not recorded on, the gate's timing rows are
TIMING_NOT_COMPARABLE; the job then judges them on the runner (``reports.projection``):
the record holds the ``Projection`` (the machine factor per class, measured here on the
baseline's commit) and a reading for every gated row, an A/B one for the rows the screen
sent to A/B and a ``projected`` one (SAME, its change against the projection) for the
others; ``apply_ab`` turns those TIMING_NOT_COMPARABLE rows into the readings' verdicts.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..config import Settings
from ..results.schema import Key, ResultRow
from .gate import _order, evaluate, row_fails
from .projection import CONTRADICTED, PROJECTED, SCREENED, Projection
from .stats import median
from .verdicts import SPEED_CALLS, GateResult, RowVerdict, Verdict

AB_KEY = "ab_confirm"
#: A/B verdicts that clear a stored-baseline SLOWER; any other (SLOWER, AMBIGUOUS,
#: MISSING, ERROR, ...) leaves the row failing
CLEARING = (Verdict.SAME.value, Verdict.FASTER.value)
AB_RECORD_VERSION = 5   # 2: each row's threshold; 3: each row's rounds; 4: projection;
#                         5: seeded (round 0 of each side measured before the A/B)


@dataclass(frozen=True)
class ABRow:
    """One row's same-machine A/B reading: ``verdict`` of the current commit against the
    baseline's commit, ``change`` = current / baseline - 1 of the pooled medians, and
    ``threshold``, the move it had to exceed (max(min_effect, the A/B rounds' own noise
    margin for the row)): a slowdown under it cannot be confirmed on that row (NaN in a
    record of version 1, which did not store it). ``rounds``: the interleaved rounds per
    side the row was judged on, when more than the record's (an undecided row measured
    again, its threshold then the standard error of the rounds' means); 0 = the
    record's. ``baseline_commit``: the commit the row was measured against where it is not
    the record's (a baseline whose rows come from several commits, after ``harness
    baseline accept --only-faster``: each row is measured against its own row's commit);
    "" = the record's. ``source``: "" for an A/B reading, ``projected`` for a row of a
    foreign GPU model judged against the projected baseline alone (``reports.projection``:
    ``change`` against the projection, ``threshold`` the screen), ``screened`` for one the
    screen sent to an A/B that gave no reading (the screen's verdict, SLOWER or SAME,
    stands), ``contradicted`` for one whose A/B called the direction opposite to the one
    the screen sent it for (SAME; ``change`` the A/B's)."""

    case_id: str
    path: str
    mode: str
    verdict: str
    change: float
    threshold: float = math.nan
    rounds: int = 0
    baseline_commit: str = ""
    source: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case_id, self.path, self.mode)


@dataclass(frozen=True)
class ABRecord:
    """The A/B confirmation of one matrix of a run (see the module docstring);
    ``projection``: how a run on another GPU model than the baseline's was judged;
    ``seeded``: round 0 of each side was not measured by the A/B but taken from what the
    job measured before it (the machine factor's readings at the baseline's commit, the
    bench's own: ``engines.compare``'s ``seeds``), the other ``rounds - 1`` were."""

    matrix: str
    baseline_commit: str
    current_commit: str
    rounds: int
    rows: tuple[ABRow, ...]
    version: int = AB_RECORD_VERSION
    projection: Projection | None = None
    seeded: bool = False

    def to_dict(self) -> dict:
        return {"version": self.version, "matrix": self.matrix,
                "baseline_commit": self.baseline_commit,
                "current_commit": self.current_commit, "rounds": self.rounds,
                "rows": {"|".join(r.key): {"verdict": r.verdict,
                                           "change": _finite(r.change),
                                           "threshold": _finite(r.threshold),
                                           **({"rounds": r.rounds} if r.rounds else {}),
                                           **({"baseline_commit": r.baseline_commit}
                                              if r.baseline_commit else {}),
                                           **({"source": r.source} if r.source else {})}
                         for r in self.rows},
                **({"projection": self.projection.to_dict()} if self.projection else {}),
                **({"seeded": True} if self.seeded else {})}

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "<ab_confirm>") -> ABRecord:
        """Parse a stored record; a malformed one raises ``ValueError`` naming ``source``."""
        try:
            rows = []
            for key, v in dict(d["rows"]).items():
                case_id, path, mode = key.split("|")
                change, threshold = v.get("change"), v.get("threshold")
                rows.append(ABRow(case_id, path, mode, str(v["verdict"]),
                                  math.nan if change is None else float(change),
                                  math.nan if threshold is None else float(threshold),
                                  int(v.get("rounds", 0)),
                                  str(v.get("baseline_commit", "")), str(v.get("source", ""))))
            proj = Projection.from_dict(d["projection"]) if d.get("projection") else None
            return cls(str(d["matrix"]), str(d["baseline_commit"]), str(d["current_commit"]),
                       int(d["rounds"]), tuple(rows), int(d.get("version", AB_RECORD_VERSION)),
                       proj, bool(d.get("seeded", False)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{source}: malformed '{AB_KEY}' record ({exc})") from None


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def screen_keys(current: Sequence[ResultRow], baseline: Sequence[ResultRow],
                settings: Settings, *, partial: bool | str = False,
                against_others: bool = True) -> set[Key]:
    """The gated rows A/B must decide, against a baseline from another machine:

    * a row whose median moved beyond ``settings.ab_screen`` (Mann-Whitney significant),
      whatever its cross-machine margin: the gate with min_effect = ab_screen, no margins;
    * every gated row of a (path, mode) that moved as a whole against the other paths:
      its median change minus the median of the other paths' (``path_moves``) beyond
      ``ab_path_screen`` (1%). A path-wide move (a launch more, a slower kernel) is what
      most slowdowns look like, while an unchanged build moves every path by about the
      machine's own offset: three fresh H200s put the paths' medians at -1.2%..+0.1%
      (§9), and on a second H100 against the first's baseline the paths of a matrix
      moved +0.0..+2.1% together (d1 of 2026-12-05), sending 14 unchanged SwiGLU rows
      to A/B under an absolute 1%. Against the others, a 3% slowdown of one path on a
      machine 1.2% faster still reads +3%, and the machine's offset sends nothing.
      ``against_others=False`` (or fewer than two other paths in the mode): the path's
      own median change, as where the baseline was already projected onto this machine.
    """
    return screen(current, baseline, settings, partial=partial,
                  against_others=against_others)[0]


def screen(current: Sequence[ResultRow], baseline: Sequence[ResultRow], settings: Settings,
           *, partial: bool | str = False, against_others: bool = True,
           both_ways: bool = False) -> tuple[set[Key], GateResult]:
    """``screen_keys``' keys and the gate they were read from (min_effect = ab_screen,
    no margins): each screened row's own reading against ``baseline``. ``both_ways``:
    rows and paths that moved beyond the screen to the faster side go to A/B too (a
    foreign model, where the A/B is the only reading that can call a row FASTER; the
    same-model gate calls FASTER against its stored margins)."""
    loose = replace(settings, min_effect=settings.ab_screen)
    res = evaluate(current, baseline, loose, margins={}, partial=partial)
    keys = {v.key for v in res.failures if v.verdict == Verdict.SLOWER}
    if both_ways:
        keys |= {v.key for v in res.verdicts if v.verdict == Verdict.FASTER and _both_ok(v)
                 and row_fails(Verdict.SLOWER, v.current.role, v.mode, settings)}
    moved = moved_paths(res.verdicts, settings, against_others, both_ways)
    for v in res.verdicts:
        if (_both_ok(v) and (v.path, v.mode) in moved
                and row_fails(Verdict.SLOWER, v.current.role, v.mode, settings)):
            keys.add(v.key)
    return keys, res


def moved_paths(verdicts: Sequence, settings: Settings, against_others: bool = True,
                both_ways: bool = False) -> dict[tuple[str, str], float]:
    """(path, mode) -> its move (``path_moves``), for the paths that moved beyond
    ``settings.ab_path_screen`` (slower; either way with ``both_ways``): the screen sends
    their gated rows whole."""
    return {k: m for k, m in path_moves(verdicts, against_others).items()
            if (abs(m) if both_ways else m) > settings.ab_path_screen}


def _both_ok(v) -> bool:
    """A row timed on both sides (its time change is a number)."""
    return (v.current is not None and v.baseline is not None and v.current.status == "ok"
            and v.baseline.status == "ok" and math.isfinite(v.time_change))


def path_moves(verdicts: Sequence, against_others: bool = True) -> dict[tuple[str, str], float]:
    """(path, mode) -> its move: the median time change of its rows measured on both
    sides, less the median of the other paths' medians in that mode (paths and peers
    alike: all measured on this machine) where there are at least two others and
    ``against_others``."""
    changes: dict[tuple[str, str], list[float]] = defaultdict(list)
    for v in verdicts:
        if _both_ok(v):
            changes[(v.path, v.mode)].append(v.time_change)
    own = {k: median(c) for k, c in changes.items()}
    moves = {}
    for (path, mode), m in own.items():
        others = [x for (p, md), x in own.items() if md == mode and p != path]
        moves[(path, mode)] = m - median(others) if against_others and len(others) >= 2 else m
    return moves


def stored_ab(meta) -> ABRecord | None:
    """The A/B record a run's matrix json holds (``RunMeta.extra``), or None."""
    raw = getattr(meta, "extra", {}).get(AB_KEY)
    return ABRecord.from_dict(raw, getattr(meta, "matrix", AB_KEY)) if raw else None


def same_commit(a: str, b: str) -> bool:
    """Two commit ids name one commit (full or abbreviated, >= 7 hex digits)."""
    a, b = a.strip().lower(), b.strip().lower()
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


def record_for(meta, baseline_commit: str) -> ABRecord | None:
    """``stored_ab(meta)`` when it was measured against ``baseline_commit`` (the baseline
    being replayed), else None: an A/B reading against one commit says nothing about
    another baseline."""
    record = stored_ab(meta)
    if record is None or not same_commit(record.baseline_commit, baseline_commit):
        return None
    return record


def apply_ab(result: GateResult, record: ABRecord | None) -> GateResult:
    """``result`` with its failing SLOWER rows confirmed or cleared by ``record``."""
    if record is None or not record.rows:
        return result
    by_key = {r.key: r for r in record.rows}

    def against(*commits: str) -> str:
        return (f"A/B on this machine, {record.rounds} interleaved round(s), against "
                + ", ".join(dict.fromkeys((c or record.baseline_commit)[:12] for c in commits)))

    out, cleared, kept, found = [], 0, 0, 0
    here: Counter = Counter()           # a foreign model's rows, by the verdict they got
    for v in result.verdicts:
        ab = by_key.get(v.key) if v.matrix == record.matrix else None
        if ab is None:
            out.append(v)
            continue
        limit = f", threshold {ab.threshold:.2%}" if math.isfinite(ab.threshold) else ""
        if ab.rounds:
            limit += f" after {ab.rounds} rounds, from the standard error of their means"
        said = f"{against(ab.baseline_commit)}: {ab.change:+.2%} ({ab.verdict}{limit})"
        if v.verdict == Verdict.TIMING_NOT_COMPARABLE and v.current is not None:
            out.append(judged_here(v, ab, record.projection, said, result.settings))
            here[(out[-1].verdict.value, "A/B" if not ab.source else ab.source)] += 1
            continue
        if v.verdict in (Verdict.SAME, Verdict.FASTER) and not v.fails and v.current is not None:
            # inside the margin, or faster than a baseline from another machine: the A/B
            # against the baseline's commit on this machine is the reading that counts
            if ab.verdict == Verdict.SLOWER.value:
                out.append(replace(v, verdict=Verdict.SLOWER, fails=True, reasons=v.reasons + (
                    f"found by the A/B screen (moved {v.time_change:+.2%} against the stored "
                    f"baseline) and confirmed by {said}",)))
                found += 1
            else:
                out.append(replace(v, reasons=v.reasons + (f"A/B screen: {said}",)))
            continue
        if v.verdict != Verdict.SLOWER or not v.fails:
            out.append(v)
            continue
        if ab.verdict not in CLEARING:        # SLOWER, or no usable A/B reading
            how = "confirmed by" if ab.verdict == Verdict.SLOWER.value else "not cleared by"
            out.append(replace(v, reasons=v.reasons + (f"{how} {said}",)))
            kept += 1
        else:
            out.append(replace(v, verdict=Verdict.SAME, fails=False,
                               reasons=v.reasons + (f"cleared by {said}: the stored "
                                                    "baseline's offset is the machine's",)))
            cleared += 1
    notes: tuple[str, ...] = ()
    if record.projection is not None:
        done = ", ".join(f"{n} {verdict} ({how})" for (verdict, how), n in sorted(here.items()))
        notes = (record.projection.note() + f": {done or 'no row judged'}",)
    if kept or cleared or found or record.projection is None:
        notes += (f"{against(*(r.baseline_commit for r in record.rows if not r.source))}: "
                  f"{kept} SLOWER row(s) kept, {cleared} cleared, {found} found by the A/B "
                  "screen (docs/measurement.md §9)",)
    if record.seeded and notes:
        notes = (notes[0] + "; round 0 of each A/B side: the readings taken before it (the "
                 "machine factor's at the baseline's commit, the bench's own)",) + notes[1:]
    return replace(result, verdicts=tuple(sorted(out, key=_order)), notes=result.notes + notes)


def judged_here(v: RowVerdict, ab: ABRow, projection: Projection | None, said: str,
                settings: Settings) -> RowVerdict:
    """A TIMING_NOT_COMPARABLE row (another GPU model) judged on this runner: a
    ``projected`` reading reads SAME (inside the screen against the projected baseline);
    an A/B reading gives its own verdict (SLOWER fails as on the baseline's model); an
    A/B that gave no reading (MISSING, ERROR) leaves the row as it was."""
    how = projection.factor_text(v.current) if projection is not None else "no projection"
    rest = tuple(r for r in v.reasons if not r.startswith("timing not compared"))
    if ab.source == PROJECTED:
        faster = (" (faster than the projection, not significantly or screened one-sided: "
                  "on another model a speed-up is called by an A/B only)"
                  if ab.change < -ab.threshold else "")
        why = (f"judged on this runner: {ab.change:+.2%} against the baseline projected by "
               f"{how}, inside the {ab.threshold:.1%} screen{faster}")
        return replace(v, verdict=Verdict.SAME, fails=False, reasons=(why, *rest),
                       time_change=ab.change, threshold=ab.threshold)
    if ab.source == CONTRADICTED:
        sent = "faster" if ab.change > 0 else "slower"
        why = (f"screened on this runner (baseline projected by {how}) as {sent}, then "
               f"{said}, the other way: two readings that disagree in direction are the "
               "spread between processes, not a change")
        return replace(v, verdict=Verdict.SAME, fails=False, reasons=(why, *rest),
                       time_change=ab.change, threshold=ab.threshold)
    if ab.source == SCREENED:   # its A/B failed: the screen's reading stands, unconfirmed
        verdict = Verdict.SLOWER if ab.verdict == Verdict.SLOWER.value else Verdict.SAME
        why = (f"screened on this runner: {ab.change:+.2%} against the baseline projected "
               f"by {how} ({ab.verdict}); its A/B gave no reading, so that verdict stands, "
               "unconfirmed, as a same-model bench's does")
        return replace(v, verdict=verdict, fails=row_fails(verdict, v.role, v.mode, settings),
                       reasons=(why, *rest), time_change=ab.change, threshold=ab.threshold)
    if ab.verdict not in {c.value for c in SPEED_CALLS}:
        return replace(v, reasons=v.reasons + (f"no reading from {said}",))
    verdict = Verdict(ab.verdict)
    why = f"screened on this runner (baseline projected by {how}), then {said}"
    return replace(v, verdict=verdict, fails=row_fails(verdict, v.role, v.mode, settings),
                   reasons=(why, *rest), time_change=ab.change, threshold=ab.threshold)
