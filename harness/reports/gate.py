"""The regression gate: a verdict per (case, path, mode) row of a run against a baseline
(the judging; the records it returns, ``Verdict``, ``RowVerdict``, ``GateResult``, are in
``harness.reports.verdicts``).

Verdicts (``Verdict``): SAME, FASTER, SLOWER, AMBIGUOUS, TIMING_NOT_COMPARABLE,
WORSE_ACCURACY, LESS_ACCURATE, NONDETERMINISTIC, LOST_DISPATCH, NEW, MISSING, ERROR. A row
*fails* the gate when its verdict is in ``FAILING`` and its ``role`` is ``path`` (peers
such as tinygemm or cuBLAS are informational columns).
``GateResult.exit_code`` is 1 when any row fails, else 0; FASTER never fails and
AMBIGUOUS (after re-measurement) does not fail either.

Per row, in order: the current status (``error``/``rejected`` -> ERROR; ``unavailable``
where the baseline was ``ok`` -> MISSING; absent where the baseline was ``ok`` ->
MISSING; no usable baseline row -> NEW); then absolute accuracy (rel_err over the gate,
i.e. over max(``rel_err_gate``, the path's documented bound); NaN/Inf outputs; the worst
of the row's ``accuracy_runs`` runs on identical inputs over that bound; for
``kind == "ppl"`` rows, PPL drift against the baseline's PPL or ``|ppl_drift_vs_native|``
above ``ppl_drift_tolerance``) -> WORSE_ACCURACY; then accuracy against the baseline's
row, even inside the bound -> LESS_ACCURATE when
  * rel_err > baseline rel_err x (1 + ``rel_err_growth``), or
  * rms_ulp_p99 > baseline rms_ulp_p99 + max(``rms_ulp_slack``, ``rms_ulp_growth`` x
    baseline rms_ulp_p99) (ULPs at the RMS of each reference row:
    ``harness.measure.accuracy``),
  each compared only when both sides are finite (a baseline written before the rms_ulp
  columns reads them as NaN: no comparison, no reason). The per-element max_ulp /
  p99_ulp are not gated (near-zero outputs dominate them); they stay in the rows and
  reports, with their deltas, as detail.
Then run-to-run variation (``distinct_outputs`` > 1) -> NONDETERMINISTIC when the path
promises identical outputs (``nondeterminism_note`` empty) or ``fail_on_nondeterminism``
is 1, otherwise a reason on the row (``RowVerdict.nondeterministic``) that does not fail;
then dispatch (the baseline's dispatcher chose a Marlin path, the current one does not;
flagged on the row of the path the baseline dispatched to) -> LOST_DISPATCH; then speed
(``stats.speed_call``), unless the caller says the two sides' times cannot be compared
(``timing_reason``: another GPU model of the arch, ``environment.check_gate_environment``)
-> TIMING_NOT_COMPARABLE, which never fails: the other checks still apply.
The first applicable verdict in ``verdicts.PRIORITY`` order wins; ``reasons`` lists them all.

Extension point: ``remeasure(keys)``, supplied by the measurement engine, is called once
with the keys of every AMBIGUOUS row and of every failing SLOWER row (a SLOWER is
confirmed before it fails the gate: on an H200, 13 A/A repetitions of 48 decode rows gave
3 first-measurement SLOWERs of +3.2..4.0% against a 3% threshold, transient drift that a
second measurement does not repeat; a real slowdown does); it returns fresh current-side
rows, or a pair ``(baseline_rows, current_rows)`` when it re-measured both builds
interleaved. Those rows replace the old ones for a second, final decision.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..config import Settings
from ..results.schema import Key, ResultRow
from .policy import with_winner_changes
from .stats import speed_call
from .verdicts import (  # noqa: F401  (HOST_PACED_MODES, row_fails: re-exported)
    FAILING,
    HOST_PACED_MODES,
    RANK,
    GateResult,
    Remeasure,
    RowVerdict,
    Verdict,
    _speed_is_information,
    row_fails,
)

#: ``evaluate(partial=...)`` for a run of some timing modes only (``harness bench --mode``,
#: ``harness job``'s graph-only default on a GPU): the baseline's rows of the other modes
#: are not judged, every case and path of the measured modes still is.
PARTIAL_MODES = "modes"


def is_marlin_path(name: str) -> bool:
    """The old rule on a name: a Marlin kernel ran when it contains 'marlin'. Only for rows
    stored before ``dispatch_marlin`` existed (``dispatched_marlin``)."""
    return "marlin" in (name or "").lower()


def dispatched_marlin(row: ResultRow) -> bool:
    """Whether the path the dispatcher chose for ``row``'s case runs Marlin: the row's
    ``dispatch_marlin`` column (the runner asks that path, ``GemmPath.is_marlin``); for a
    row stored before the column existed (schema < 4: None) the old rule on the name."""
    if row.dispatch_marlin is not None:
        return bool(row.dispatch_marlin)
    return is_marlin_path(row.dispatch_path)


def _accuracy_problems(cur: ResultRow, base: ResultRow | None, s: Settings) -> list[str]:
    """WORSE_ACCURACY reasons: absolute accuracy (and PPL drift against the baseline)."""
    out = []
    if cur.nonfinite > 0:
        out.append(f"{cur.nonfinite} non-finite outputs")
    elif cur.kind != "ppl" and not math.isfinite(cur.rel_err):
        out.append(f"rel_err is {cur.rel_err} (no finite accuracy measurement on an ok row)")
    bound = s.rel_err_gate
    if math.isfinite(cur.rel_err_bound):
        bound = max(bound, cur.rel_err_bound)  # a documented per-path bound (GemmPath.error_bound)
    if math.isfinite(cur.rel_err) and cur.rel_err > bound:
        was = (f" (baseline {base.rel_err:.3g})"
               if base is not None and math.isfinite(base.rel_err) else "")
        out.append(f"rel_err {cur.rel_err:.3g} over the gate {bound:g}{was}")
    elif (cur.distinct_outputs > 1 and math.isfinite(cur.worst_rel_err)
          and cur.worst_rel_err > bound):
        out.append(f"the worst of {cur.accuracy_runs} runs on identical inputs has rel_err "
                   f"{cur.worst_rel_err:.3g}, over the gate {bound:g} "
                   f"(most frequent output: {cur.rel_err:.3g})")
    drift = cur.ppl_drift_vs_native
    if cur.kind == "ppl" and math.isfinite(drift) and abs(drift) > s.ppl_drift_tolerance:
        out.append(f"PPL drift vs native INT4 {drift:+.2%} "
                   f"beyond tolerance {s.ppl_drift_tolerance:.2%}")
    if base is None:
        return out
    if cur.kind == "ppl" and math.isfinite(cur.ppl) and math.isfinite(base.ppl) and base.ppl > 0:
        drift = cur.ppl / base.ppl - 1.0
        if abs(drift) > s.ppl_drift_tolerance:
            out.append(f"PPL {cur.ppl:.4f} drifts {drift:+.2%} from baseline {base.ppl:.4f}"
                       f" (tolerance {s.ppl_drift_tolerance:.2%})")
    return out


def _accuracy_growth(cur: ResultRow, base: ResultRow | None, s: Settings) -> list[str]:
    """LESS_ACCURATE reasons: the row's error grew against its baseline row.

    Only figures finite on both sides are compared (NaN/Inf outputs are WORSE_ACCURACY's;
    a baseline without the rms_ulp columns is not compared on them).
    """
    if base is None or cur.nonfinite > 0:
        return []
    out = []
    c, b = cur.rel_err, base.rel_err
    if math.isfinite(c) and math.isfinite(b) and c > b * (1.0 + s.rel_err_growth):
        grew = f"{c / b - 1.0:+.0%}" if b > 0 else "from 0"
        out.append(f"rel_err {c:.3g} grew {grew} over baseline {b:.3g} (allowed "
                   f"+{s.rel_err_growth:.0%}, rel_err_growth)")
    c, b = cur.rms_ulp_p99, base.rms_ulp_p99
    if math.isfinite(c) and math.isfinite(b):
        tol = max(s.rms_ulp_slack, s.rms_ulp_growth * abs(b))
        if c > b + tol:
            out.append(f"rms_ulp_p99 {c:.3g} > baseline {b:.3g} + {tol:.3g} (max of rms_ulp_slack "
                       f"{s.rms_ulp_slack:g} and rms_ulp_growth {s.rms_ulp_growth:.0%} "
                       "of the baseline's)")
    return out


def _variation(cur: ResultRow, s: Settings) -> tuple[Verdict | None, str]:
    """(NONDETERMINISTIC or None, what varied) for a row whose runs differed; ("" if none)."""
    if cur.distinct_outputs <= 1:
        return None, ""
    what = (f"{cur.distinct_outputs} distinct outputs in {cur.accuracy_runs} runs "
            "on identical inputs "
            f"(worst run: rel_fro_err {cur.worst_rel_fro_err:.3g}, "
            f"max_ulp {cur.worst_max_ulp:.3g}; "
            f"most frequent: {cur.rel_fro_err:.3g}, {cur.max_ulp:.3g})")
    if not cur.nondeterminism_note:
        return Verdict.NONDETERMINISTIC, what + "; this path promises identical outputs"
    if s.fail_on_nondeterminism:
        return (Verdict.NONDETERMINISTIC,
                what + f"; expected ({cur.nondeterminism_note}) but fail_on_nondeterminism = 1")
    return None, what + f"; expected for this path ({cur.nondeterminism_note}): informational"


def _deltas(cur: ResultRow, base: ResultRow) -> dict:
    ppl = (cur.ppl / base.ppl - 1.0
           if base.ppl and math.isfinite(base.ppl) and base.ppl > 0 else math.nan)
    return dict(delta_rel_err=cur.rel_err - base.rel_err,
                delta_rms_ulp_p99=cur.rms_ulp_p99 - base.rms_ulp_p99,
                delta_max_ulp=cur.max_ulp - base.max_ulp,
                delta_p99_ulp=cur.p99_ulp - base.p99_ulp, ppl_drift=ppl)


def judge_row(
    cur: ResultRow | None, base: ResultRow | None, settings: Settings, *,
    margin: float = math.nan, lost_dispatch: bool = False, timing_reason: str | None = None,
) -> RowVerdict:
    """The verdict of one key (see the module docstring for the order of checks);
    ``timing_reason``: why no speed verdict may be called (TIMING_NOT_COMPARABLE)."""
    ref = cur if cur is not None else base
    if ref is None:
        raise ValueError("judge_row needs a current or a baseline row")
    found: list[tuple[Verdict, str]] = []
    notes: list[str] = []                     # reasons that are not verdicts
    extra: dict = {}
    base_ok = base is not None and base.status == "ok"
    if cur is None:
        if base_ok:
            found.append((Verdict.MISSING, "in the baseline but not in this run"))
        else:
            found.append((Verdict.SAME, f"absent; the baseline row was {base.status} too"))
    elif cur.status in ("error", "rejected"):
        what = "timing rejected" if cur.status == "rejected" else "error"
        found.append((Verdict.ERROR, f"{what}: {cur.error or 'no message'}"))
    elif cur.status == "unavailable":
        if base_ok:
            found.append((Verdict.MISSING, f"unavailable now ({cur.error or 'no reason given'}), "
                                           "ok in the baseline"))
        elif base is None:
            found.append((Verdict.NEW, f"unavailable here: {cur.error or 'no reason given'}"))
        else:
            found.append((Verdict.SAME, f"unavailable: {cur.error or 'no reason given'}"))
    else:
        problems = _accuracy_problems(cur, base if base_ok else None, settings)
        found += [(Verdict.WORSE_ACCURACY, p) for p in problems]
        growth = _accuracy_growth(cur, base if base_ok else None, settings)
        varied, what = _variation(cur, settings)
        racy = ((cur.distinct_outputs > 1 or (base_ok and base.distinct_outputs > 1))
                and varied is None)
        if racy and growth:
            # a path documented to vary between runs (Marlin's race at large M): which output
            # is the most frequent can change between processes, so growth is reported only
            notes += [g + " (outputs vary between runs on this path: informational)"
                      for g in growth]
        else:
            found += [(Verdict.LESS_ACCURATE, g) for g in growth]
        if varied is not None:
            found.append((varied, what))
        elif what:
            notes.append(what)
        extra["nondeterministic"] = cur.distinct_outputs > 1
        if not base_ok:
            found.append((Verdict.NEW, "no baseline row" if base is None
                          else f"baseline row was {base.status}"))
        else:
            extra.update(_deltas(cur, base))
            if lost_dispatch:
                found.append((Verdict.LOST_DISPATCH,
                              f"dispatcher chose {base.dispatch_path} in the baseline, now "
                              f"{cur.dispatch_path or 'nothing'}"
                              + (f" ({cur.fallback_reason})" if cur.fallback_reason else "")))
            if timing_reason:       # the times are shown, never judged
                extra.update(base_median_us=base.time_us_median, cur_median_us=cur.time_us_median)
                found.append((Verdict.TIMING_NOT_COMPARABLE,
                              f"timing not compared: {timing_reason}"))
            else:
                sc = speed_call(base.samples(), cur.samples(), alpha=settings.alpha,
                                min_effect=settings.min_effect, margin=margin,
                                base_median=base.time_us_median, cur_median=cur.time_us_median)
                extra.update(base_median_us=sc.base_median, cur_median_us=sc.cur_median,
                             time_change=sc.change, p_value=sc.p_value, threshold=sc.threshold)
                call = Verdict.SAME if sc.call == "NONE" else Verdict(sc.call)
                found.append((call, sc.reason))
    found.sort(key=lambda vr: RANK[vr[0]])
    verdict = found[0][0]
    role = ref.role
    eager_speed_only = _speed_is_information(verdict, ref.mode, settings)
    fails = row_fails(verdict, role, ref.mode, settings)
    reasons = tuple(r for _, r in found) + tuple(notes)
    if verdict in FAILING and role == "peer":
        reasons += ("peer row: informational, does not fail the gate",)
    elif eager_speed_only:
        reasons += (f"{ref.mode}-mode speed: informational (gate_eager_speed = 0)",)
    if cur is not None and "cur_median_us" not in extra:
        extra["cur_median_us"] = cur.time_us_median
    return RowVerdict(
        matrix=ref.matrix, case_id=ref.case_id, path=ref.path, mode=ref.mode, role=role,
        verdict=verdict, reasons=reasons, fails=fails, current=cur, baseline=base,
        margin=margin, **extra,
    )


def _index(rows: Sequence[ResultRow], by_matrix: bool) -> dict[tuple, ResultRow]:
    out: dict[tuple, ResultRow] = {}
    for r in rows:
        k = (r.matrix, *r.key) if by_matrix else r.key
        if k in out:
            raise ValueError(f"two rows for {k} in one run")
        out[k] = r
    return out


def _lost_dispatch_keys(cur: dict, base: dict) -> set[tuple]:
    """Keys of the rows that carry a LOST_DISPATCH (see ``dispatched_marlin``)."""
    by_case: dict[tuple, list[tuple]] = defaultdict(list)
    for k in set(cur) & set(base):
        by_case[k[:-2]].append(k)  # group by (matrix?, case_id)
    flagged: set[tuple] = set()
    for keys in by_case.values():
        lost = [k for k in keys if base[k].status == "ok" and cur[k].status == "ok"
                and dispatched_marlin(base[k]) and not dispatched_marlin(cur[k])]
        if not lost:
            continue
        chosen = [k for k in lost if cur[k].path == base[k].dispatch_path]
        chosen = chosen or [k for k in lost
                            if is_marlin_path(cur[k].path) and cur[k].role == "path"]
        chosen = chosen or [k for k in lost if cur[k].role == "path"] or lost
        flagged.update(chosen)
    return flagged


def evaluate(
    current: Sequence[ResultRow],
    baseline: Sequence[ResultRow],
    settings: Settings,
    *,
    margins: Mapping[Key, float] | None = None,
    remeasure: Remeasure | None = None,
    partial: bool | str = False,
    current_label: str = "current",
    baseline_label: str = "baseline",
    timing_reason: str | None = None,
) -> GateResult:
    """Gate ``current`` against ``baseline`` row by row.

    Rows match on (case_id, path, mode), and also on matrix when either side holds more
    than one matrix. ``margins`` are per-key noise margins (from calibration);
    ``partial=True`` ignores baseline rows whose case, path or mode the current run did not
    measure (a filtered run: --filter, --paths) instead of calling them MISSING;
    ``partial=PARTIAL_MODES`` (a run of some timing modes: ``--mode``, the GPU job's graph
    default) ignores only the rows of modes it did not measure, so a case or a path that
    went missing from a measured mode is still MISSING.
    The environments must have been checked by the caller
    (``environment.check_gate_environment``); its ``timing_reason`` (another GPU model)
    turns every speed verdict into TIMING_NOT_COMPARABLE.
    """
    margins = margins or {}
    remeasured: tuple[ResultRow, ...] = ()
    by_matrix = len({r.matrix for r in current}) > 1 or len({r.matrix for r in baseline}) > 1
    cur, base = _index(current, by_matrix), _index(baseline, by_matrix)
    if partial == PARTIAL_MODES:   # some modes measured: their rows are judged in full
        modes = {k[-1] for k in cur}
        base = {k: v for k, v in base.items() if k[-1] in modes}
    elif partial:   # a filtered run: only the cases, paths and modes it measured are judged
        cases, paths, modes = {k[:-2] for k in cur}, {k[-2] for k in cur}, {k[-1] for k in cur}
        base = {k: v for k, v in base.items()
                if k[:-2] in cases and k[-2] in paths and k[-1] in modes}
    lost = _lost_dispatch_keys(cur, base)

    def judge(k: tuple, c: ResultRow | None, b: ResultRow | None) -> RowVerdict:
        return judge_row(c, b, settings, margin=margins.get(k[-3:], math.nan),
                         lost_dispatch=k in lost, timing_reason=timing_reason)

    verdicts = {k: judge(k, cur.get(k), base.get(k)) for k in sorted(set(cur) | set(base))}
    notes: list[str] = []
    ambiguous = [k for k, v in verdicts.items() if v.verdict == Verdict.AMBIGUOUS
                 or (v.verdict == Verdict.SLOWER and v.fails)]
    first = {k: verdicts[k] for k in ambiguous}
    if ambiguous and remeasure is not None:
        keys = sorted({k[-3:] for k in ambiguous})
        new_base, new_cur = _split_remeasured(remeasure(keys))
        fresh_cur = {r.key: r for r in new_cur}
        fresh_base = {r.key: r for r in new_base}
        for k in ambiguous:
            c = fresh_cur.get(k[-3:])
            if c is None:
                old = verdicts[k]
                verdicts[k] = replace(
                    old, reasons=old.reasons + ("re-measurement returned no row",))
                continue
            b = fresh_base.get(k[-3:], base.get(k))
            rv = judge(k, replace(c, matrix=cur[k].matrix), b)
            was = first[k]
            tag = (f"re-measured (first: {was.verdict.value} {was.time_change:+.2%})"
                   if math.isfinite(was.time_change) else "re-measured")
            verdicts[k] = replace(rv, remeasured=True, reasons=rv.reasons + (tag,),
                                  first_verdict=was.verdict.value, first_change=was.time_change)
        notes.append(f"re-measured {len(keys)} ambiguous or first-time SLOWER row(s)")
        remeasured = tuple(fresh_cur[k] for k in keys if k in fresh_cur)
    elif ambiguous:
        notes.append(f"{len(ambiguous)} ambiguous or SLOWER row(s) not re-measured "
                     "(no re-measure hook)")
    if not timing_reason:     # another GPU model's winners are its own, not a change
        verdicts = with_winner_changes(verdicts, settings)
    ordered = sorted(verdicts.values(), key=_order)
    return GateResult(tuple(ordered), settings, current_label=current_label,
                      baseline_label=baseline_label, has_baseline=bool(baseline),
                      notes=tuple(notes),
                      remeasured=remeasured)


def stored_remeasure(rows: Sequence[ResultRow]) -> Remeasure:
    """A ``remeasure`` that replays rows a bench stored with its run (``confirm/``) instead
    of measuring: a key it holds gets that row, any other key none (the gate then keeps
    the first verdict and says the re-measurement returned no row)."""
    by_key = {r.key: r for r in rows}

    def replay(keys: list[Key]) -> list[ResultRow]:
        return [by_key[k] for k in keys if k in by_key]

    return replay


def _order(v: RowVerdict) -> tuple:
    r = v.row
    return (not v.fails, RANK[v.verdict], v.matrix, r.kind, r.N, r.K, r.group_size, r.M,
            v.case_id, v.path, v.mode)


def _split_remeasured(result) -> tuple[list[ResultRow], list[ResultRow]]:
    if (isinstance(result, tuple) and len(result) == 2
            and not isinstance(result[0], ResultRow) and not isinstance(result[1], ResultRow)):
        return list(result[0]), list(result[1])
    return [], list(result)
