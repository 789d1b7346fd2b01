"""The rows ``harness job``'s A/B confirms, and its readings stored with the run.

``stored_gate`` reads a matrix's gate as its bench reached it; ``pending`` the rows to
confirm (its SLOWER rows and the rows the screen flags; for another GPU model, none
until the projection has screened); ``commit_groups`` groups them by the commit their
baseline row was measured at; ``store_readings`` writes the A/B record into the
matrix's json and rewrites its gate record (``ab_step`` drives them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import Settings
from ..reports.ab_confirm import AB_KEY, ABRecord, ABRow, apply_ab, moved_paths, same_commit, screen
from ..reports.gate import evaluate, stored_remeasure
from ..reports.gate_record import stored_partial, write_gate_record
from ..reports.projection import CONTRADICTED, PROJECTED, SCREENED
from ..reports.stats import call_of
from ..reports.verdicts import SPEED_CALLS, GateResult, RowVerdict, Verdict
from ..results.baseline import check_baseline_gate, run_settings
from ..results.models import load_for_model
from ..results.store import load_run, read_meta, write_meta
from .projection_step import Projected


@dataclass(frozen=True)
class StoredGate:
    """A matrix's gate as its bench reached it, and what the A/B needs of it."""

    result: GateResult
    base_commit: str
    screened: set[tuple[str, str, str]]
    partial: bool | str
    #: another GPU model than the baseline's: (the baseline's model, this run's), else None
    models: tuple[str, str] | None = None
    #: (path, mode) -> its move against the other paths, where the screen sent it whole
    moved: Mapping[tuple[str, str], float] = field(default_factory=dict)


def stored_gate(run_dir: Path, matrix: str, baselines: str | Path, arch: str,
                settings: Settings) -> StoredGate:
    """The matrix's gate as its bench reached it (the baseline of the run's GPU model when
    there is one, ``results.models``; stored confirmations replayed, a partial bench's
    unmeasured baseline rows not judged), the baseline's commit, the keys the A/B screen
    flags (``reports.ab_confirm.screen_keys``; none for another GPU model, whose timing
    rows the projection screens) and whether the gate was partial; the run and the
    baseline are read once."""
    run = load_run(run_dir / f"{matrix}.csv")
    env = run.metas[matrix].environment if matrix in run.metas else run.environment
    base = load_for_model(baselines, arch, env.gpu_name, [matrix])
    check = check_baseline_gate(base, env, lambda m: run_settings(run, m))
    partial = stored_partial(run.metas)
    result = evaluate(list(run.rows), base.rows, settings, margins=base.margins,
                      remeasure=stored_remeasure(run.confirmations), partial=partial,
                      current_label=run.label, baseline_label=base.label,
                      timing_reason=check.timing_reason)
    if check.timing_reason:
        return StoredGate(result, base.environment.commit, set(), partial,
                          (base.environment.gpu_name, env.gpu_name))
    keys, loose = screen(list(run.rows), base.rows, settings, partial=partial)
    return StoredGate(result, base.environment.commit, keys, partial,
                      moved=moved_paths(loose.verdicts, settings))


@dataclass
class Pending:
    """One matrix's rows to confirm: its stored gate, the baseline's commit, the rows;
    for another GPU model, how it was projected (``projection_step``)."""

    result: GateResult
    base_commit: str
    slow: list
    partial: bool | str = False
    projected: Projected | None = None


def pending(run_dir: Path, matrix: str, baselines: str | Path, arch: str, settings: Settings,
             echo: Callable[[str], None]) -> tuple[Pending | None, StoredGate]:
    gate = stored_gate(run_dir, matrix, baselines, arch, settings)
    if gate.models is not None:         # judged by the projection first (``ab_step.Confirmation``)
        return Pending(gate.result, gate.base_commit, [], gate.partial), gate
    result, base_commit, screened, partial = (gate.result, gate.base_commit, gate.screened,
                                              gate.partial)
    failing = [v for v in result.failures if v.verdict == Verdict.SLOWER]
    have = {v.key for v in failing}
    slow = failing + [v for v in result.verdicts
                      if v.key in screened and v.key not in have and v.current is not None]
    if not slow:
        return None, gate
    if len(failing) < len(result.failures):
        echo(f"harness job: A/B: {matrix} also fails on other verdicts; confirming its "
             f"{len(failing)} SLOWER row(s) only")
    whole = [v for v in slow[len(failing):] if (v.path, v.mode) in gate.moved]
    paths = ", ".join(f"{p} ({m}) {gate.moved[(p, m)]:+.2%}"       # the paths it sent
                      for p, m in sorted({(v.path, v.mode) for v in whole}))
    echo(f"harness job: A/B of {matrix}: {len(failing)} SLOWER row(s), "
         f"{len(slow) - len(failing) - len(whole)} more moved beyond the "
         f"{settings.ab_screen:.1%} screen"
         + (f", {len(whole)} more of a path that moved beyond {settings.ab_path_screen:.1%} "
            f"against the others: {paths}" if whole else ""))
    return Pending(result, base_commit, slow, partial), gate


def row_commit(v: RowVerdict, fallback: str) -> str:
    """The commit a verdict's baseline row was measured at: the row's own ``commit``, or
    ``fallback`` (the baseline environment's) where the row has none ("" or git's null
    id, all zeros, which synthetic rows carry)."""
    commit = v.baseline.commit.strip() if v.baseline is not None else ""
    return commit if commit.strip("0") else fallback


def commit_groups(todo: Mapping[str, Pending]) -> dict[str, list[tuple[str, RowVerdict]]]:
    """The rows to confirm of each matrix, grouped by the commit of their baseline row
    (``row_commit``; two spellings of one commit, e.g. 12 and 40 hex digits, are one
    group), in the order the matrices and their rows come."""
    groups: dict[str, list[tuple[str, RowVerdict]]] = {}
    for m, p in todo.items():
        for v in p.slow:
            commit = row_commit(v, p.base_commit)
            commit = next((c for c in groups if same_commit(c, commit)), commit)
            groups.setdefault(commit, []).append((m, v))
    return groups


def reading_of(matrix: str, v: RowVerdict, got: Mapping, extended: Mapping,
               alpha: float = 0.01) -> tuple:
    """(verdict, change, threshold, rounds) of ``v``'s A/B reading in ``got``: a speed
    verdict. Where the A/B's verdict is another kind that outranks the speed call (an
    accuracy verdict, LOST_DISPATCH, or the dispatch policy's WINNER_CHANGED: n4 of
    2026-12-06, where fp16_cache's regression made marlin_asym its class's winner), the
    A/B still timed the row: its speed call is the gate's own rule (``stats.call_of``)
    on the change, p-value (``alpha``) and threshold it kept. The row's accuracy is the
    job bench's gate to judge, not the A/B's."""
    r = got.get((matrix, *v.key))
    if r is None:
        return Verdict.MISSING.value, float("nan"), float("nan"), 0
    verdict = r.verdict.value
    if (r.verdict not in SPEED_CALLS and r.current is not None and r.current.status == "ok"
            and math.isfinite(r.time_change) and math.isfinite(r.threshold)):
        verdict = call_of(r.time_change, r.p_value, r.threshold, alpha)
    return verdict, r.time_change, r.threshold, extended.get(v.key, 0)


def contradicted(row: ABRow, proj) -> ABRow:
    """``row`` as SAME (``CONTRADICTED``, its reading kept) where another model's screen
    sent it for one direction and its A/B called the other (``Projected.directions``);
    else ``row``. A same-model A/B (``proj`` None) is left alone."""
    if proj is None or row.verdict not in (Verdict.SLOWER.value, Verdict.FASTER.value):
        return row
    allowed = proj.directions.get(row.key)
    if allowed is None or row.verdict in allowed:
        return row
    return replace(row, verdict=Verdict.SAME.value, source=CONTRADICTED)


#: A/B verdicts that are readings (MISSING, ERROR: the A/B measured nothing usable)
READ = frozenset(c.value for c in SPEED_CALLS)


def store_readings(run_dir: Path, matrix: str, pending: Pending, readings: Mapping, head: str,
                   rounds: int, echo: Callable[[str], None], seeded: bool = False) -> int:
    """Record ``matrix``'s A/B readings with the run and rewrite its gate record
    (``readings``: key -> (verdict, change, threshold, rounds), the baseline commit it was
    measured against; ``seeded``: round 0 of each side taken from readings made before the
    A/B). The record's baseline commit is the baseline's own (what a replay checks it
    against, ``record_for``); a row measured against another says so."""
    shas = [sha for _, sha in readings.values()]
    own = next((sha for sha in shas if same_commit(sha, pending.base_commit)), None)
    record_base = own or pending.base_commit or (shas[0] if shas else "")
    proj = pending.projected
    # another GPU model: a screened row the A/B gave no reading keeps the screen's verdict
    unread = [v for v in pending.slow if proj is not None
              and (v.key not in readings or readings[v.key][0][0] not in READ)]
    skip = {v.key for v in unread}
    rows = tuple(contradicted(ABRow(*v.key, *readings[v.key][0],
                                    "" if readings[v.key][1] == record_base
                                    else readings[v.key][1]), proj)
                 for v in pending.slow if v.key in readings and v.key not in skip)
    if proj is not None:       # the rows inside the screen, projected; the unread, screened
        rows += tuple(ABRow(*k, verdict, change, pending.result.settings.ab_screen,
                            source=PROJECTED)
                      for k, (verdict, change) in sorted(proj.readings.items()))
        stands = [(v.key, *proj.screen_readings.get(v.key, ("", math.nan, math.nan)))
                  for v in unread]
        rows += tuple(ABRow(*k, Verdict.SLOWER.value if verdict == Verdict.SLOWER.value
                            else Verdict.SAME.value, change, threshold, source=SCREENED)
                      for k, verdict, change, threshold in stands)
        if unread:
            slower = sum(verdict == Verdict.SLOWER.value for _, verdict, *_ in stands)
            echo(f"harness job: {matrix}: {len(unread)} screened row(s) got no A/B reading: "
                 f"the screen's verdict against the projection stands, unconfirmed "
                 f"({slower} SLOWER)")
    record = ABRecord(matrix, record_base, head, rounds, rows,
                      projection=proj.projection if proj is not None else None,
                      seeded=seeded and bool(readings))
    final = apply_ab(pending.result, record)
    csv_path = run_dir / f"{matrix}.csv"
    meta = read_meta(csv_path.with_suffix(".json"))
    write_meta(csv_path.with_suffix(".json"),
               replace(meta, extra={**meta.extra, AB_KEY: record.to_dict()}))
    write_gate_record(csv_path, final, partial=pending.partial)
    echo(f"harness job: {final.notes[-1]}; {matrix} exit {final.exit_code}")
    return final.exit_code
