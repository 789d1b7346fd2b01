"""The regression gate: a verdict per (case, path, mode) row of a run against a baseline.

Verdicts (``Verdict``): SAME, FASTER, SLOWER, AMBIGUOUS, WORSE_ACCURACY, NONDETERMINISTIC,
LOST_DISPATCH, NEW, MISSING, ERROR. A row *fails* the gate when its verdict is in ``FAILING`` and its
``role`` is ``path`` (peers such as tinygemm or cuBLAS are informational columns).
``GateResult.exit_code`` is 1 when any row fails, else 0; FASTER never fails and
AMBIGUOUS (after re-measurement) does not fail either.

Per row, in order: the current status (``error``/``rejected`` -> ERROR; ``unavailable``
where the baseline was ``ok`` -> MISSING; absent where the baseline was ``ok`` ->
MISSING; no usable baseline row -> NEW); then accuracy (rel_err over the gate, NaN/Inf,
max/p99 ULP above the baseline's by more than the tolerance, the worst of the row's
``accuracy_runs`` runs on identical inputs over the rel_err gate; for ``kind == "ppl"``
rows, PPL drift against the baseline's PPL or ``|ppl_drift_vs_native|`` above
``ppl_drift_tolerance``) -> WORSE_ACCURACY; then run-to-run variation (``distinct_outputs``
> 1) -> NONDETERMINISTIC when the path promises identical outputs
(``nondeterminism_note`` empty) or ``fail_on_nondeterminism`` is 1, otherwise a reason on
the row (``RowVerdict.nondeterministic``) that does not fail; then dispatch (the baseline's dispatcher chose
a Marlin path, the current one does not; flagged on the row of the path the baseline
dispatched to) -> LOST_DISPATCH; then speed (``stats.speed_call``).
The first applicable verdict in ``_PRIORITY`` order wins; ``reasons`` lists them all.

Extension point: ``remeasure(keys)``, supplied by the measurement engine, is called once
with the keys of every AMBIGUOUS row and of every failing SLOWER row (a SLOWER is
confirmed before it fails the gate: on an H200, 13 A/A repetitions of 48 decode rows gave
3 first-measurement SLOWERs of +3.2..4.0% against a 3% threshold, transient drift that a
second measurement does not repeat; a real slowdown does); it returns fresh current-side rows, or a pair
``(baseline_rows, current_rows)`` when it re-measured both builds interleaved. Those rows
replace the old ones for a second, final decision.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from ..config import Settings
from .schema import ResultRow
from .stats import Key, speed_call


class Verdict(str, Enum):
    SAME = "SAME"
    FASTER = "FASTER"
    SLOWER = "SLOWER"
    AMBIGUOUS = "AMBIGUOUS"
    WORSE_ACCURACY = "WORSE_ACCURACY"
    NONDETERMINISTIC = "NONDETERMINISTIC"
    LOST_DISPATCH = "LOST_DISPATCH"
    NEW = "NEW"
    MISSING = "MISSING"
    ERROR = "ERROR"

    def __str__(self) -> str:
        return self.value


FAILING = frozenset({Verdict.SLOWER, Verdict.WORSE_ACCURACY, Verdict.NONDETERMINISTIC,
                     Verdict.LOST_DISPATCH, Verdict.MISSING, Verdict.ERROR})
_PRIORITY = (Verdict.ERROR, Verdict.MISSING, Verdict.WORSE_ACCURACY, Verdict.NONDETERMINISTIC,
             Verdict.LOST_DISPATCH,
             Verdict.SLOWER, Verdict.AMBIGUOUS, Verdict.FASTER, Verdict.NEW, Verdict.SAME)
RANK = {v: i for i, v in enumerate(_PRIORITY)}

Remeasure = Callable[[list[Key]], "Sequence[ResultRow] | tuple[Sequence[ResultRow], Sequence[ResultRow]]"]


def is_marlin_path(name: str) -> bool:
    """A dispatch/path name that means a Marlin kernel ran (any name containing 'marlin')."""
    return "marlin" in (name or "").lower()


@dataclass(frozen=True)
class RowVerdict:
    """One row's verdict, the evidence, and both rows (either may be None)."""

    matrix: str
    case_id: str
    path: str
    mode: str
    role: str
    verdict: Verdict
    reasons: tuple[str, ...]
    fails: bool
    current: ResultRow | None
    baseline: ResultRow | None
    base_median_us: float = math.nan
    cur_median_us: float = math.nan
    time_change: float = math.nan      # cur / base - 1 of the medians
    p_value: float = math.nan
    threshold: float = math.nan        # max(min_effect, margin)
    margin: float = math.nan           # the calibrated per-case noise margin, if any
    delta_rel_err: float = math.nan
    delta_max_ulp: float = math.nan
    delta_p99_ulp: float = math.nan
    ppl_drift: float = math.nan        # cur.ppl / base.ppl - 1 for kind == "ppl"
    remeasured: bool = False
    nondeterministic: bool = False     # the current row's outputs differed between runs

    @property
    def key(self) -> Key:
        return (self.case_id, self.path, self.mode)

    @property
    def row(self) -> ResultRow:
        """The current row, else the baseline's (for identity columns)."""
        return self.current if self.current is not None else self.baseline  # type: ignore[return-value]

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class GateResult:
    """All verdicts of one comparison, regressions first."""

    verdicts: tuple[RowVerdict, ...]
    settings: Settings
    current_label: str = "current"
    baseline_label: str = "baseline"
    has_baseline: bool = True
    notes: tuple[str, ...] = ()

    @property
    def failures(self) -> list[RowVerdict]:
        return [v for v in self.verdicts if v.fails]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def counts(self) -> dict[Verdict, int]:
        out = {v: 0 for v in _PRIORITY}
        for rv in self.verdicts:
            out[rv.verdict] += 1
        return out

    def of(self, verdict: Verdict) -> list[RowVerdict]:
        return [v for v in self.verdicts if v.verdict == verdict]


def _accuracy_problems(cur: ResultRow, base: ResultRow | None, s: Settings) -> list[str]:
    out = []
    if cur.nonfinite > 0:
        out.append(f"{cur.nonfinite} non-finite outputs")
    elif cur.kind != "ppl" and not math.isfinite(cur.rel_err):
        out.append(f"rel_err is {cur.rel_err} (no finite accuracy measurement on an ok row)")
    bound = s.rel_err_gate
    if math.isfinite(cur.rel_err_bound):
        bound = max(bound, cur.rel_err_bound)  # a documented per-path bound (kernels/bounds.py)
    if math.isfinite(cur.rel_err) and cur.rel_err > bound:
        was = f" (baseline {base.rel_err:.3g})" if base is not None and math.isfinite(base.rel_err) else ""
        out.append(f"rel_err {cur.rel_err:.3g} over the gate {bound:g}{was}")
    elif cur.distinct_outputs > 1 and math.isfinite(cur.worst_rel_err) and cur.worst_rel_err > bound:
        out.append(f"the worst of {cur.accuracy_runs} runs on identical inputs has rel_err "
                   f"{cur.worst_rel_err:.3g}, over the gate {bound:g} (most frequent output: {cur.rel_err:.3g})")
    drift = cur.ppl_drift_vs_native
    if cur.kind == "ppl" and math.isfinite(drift) and abs(drift) > s.ppl_drift_tolerance:
        out.append(f"PPL drift vs native INT4 {drift:+.2%} beyond tolerance {s.ppl_drift_tolerance:.2%}")
    if base is None:
        return out
    for name in ("max_ulp", "p99_ulp"):
        c, b = getattr(cur, name), getattr(base, name)
        if not (math.isfinite(c) and math.isfinite(b)):
            continue
        # ULPs counted at near-cancelling outputs run into the thousands, and a changed
        # (equally exact) summation order moves them by a few: the slack grows with them
        tol = max(s.ulp_tolerance, s.ulp_rel_tolerance * abs(b))
        if c > b + tol:
            out.append(f"{name} {c:g} > baseline {b:g} + {tol:g}")
    if cur.kind == "ppl" and math.isfinite(cur.ppl) and math.isfinite(base.ppl) and base.ppl > 0:
        drift = cur.ppl / base.ppl - 1.0
        if abs(drift) > s.ppl_drift_tolerance:
            out.append(f"PPL {cur.ppl:.4f} drifts {drift:+.2%} from baseline {base.ppl:.4f}"
                       f" (tolerance {s.ppl_drift_tolerance:.2%})")
    return out


def _variation(cur: ResultRow, s: Settings) -> tuple[Verdict | None, str]:
    """(NONDETERMINISTIC or None, what varied) for a row whose runs differed; ("" if none)."""
    if cur.distinct_outputs <= 1:
        return None, ""
    what = (f"{cur.distinct_outputs} distinct outputs in {cur.accuracy_runs} runs on identical inputs "
            f"(worst run: rel_fro_err {cur.worst_rel_fro_err:.3g}, max_ulp {cur.worst_max_ulp:.3g}; "
            f"most frequent: {cur.rel_fro_err:.3g}, {cur.max_ulp:.3g})")
    if not cur.nondeterminism_note:
        return Verdict.NONDETERMINISTIC, what + "; this path promises identical outputs"
    if s.fail_on_nondeterminism:
        return Verdict.NONDETERMINISTIC, what + f"; expected ({cur.nondeterminism_note}) but fail_on_nondeterminism = 1"
    return None, what + f"; expected for this path ({cur.nondeterminism_note}): informational"


def _deltas(cur: ResultRow, base: ResultRow) -> dict:
    ppl = cur.ppl / base.ppl - 1.0 if base.ppl and math.isfinite(base.ppl) and base.ppl > 0 else math.nan
    return dict(delta_rel_err=cur.rel_err - base.rel_err, delta_max_ulp=cur.max_ulp - base.max_ulp,
                delta_p99_ulp=cur.p99_ulp - base.p99_ulp, ppl_drift=ppl)


def judge_row(
    cur: ResultRow | None, base: ResultRow | None, settings: Settings, *,
    margin: float = math.nan, lost_dispatch: bool = False,
) -> RowVerdict:
    """The verdict of one key (see the module docstring for the order of checks)."""
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
            found.append((Verdict.MISSING, f"unavailable now ({cur.error or 'no reason given'}), ok in the baseline"))
        elif base is None:
            found.append((Verdict.NEW, f"unavailable here: {cur.error or 'no reason given'}"))
        else:
            found.append((Verdict.SAME, f"unavailable: {cur.error or 'no reason given'}"))
    else:
        problems = _accuracy_problems(cur, base if base_ok else None, settings)
        found += [(Verdict.WORSE_ACCURACY, p) for p in problems]
        varied, what = _variation(cur, settings)
        if varied is not None:
            found.append((varied, what))
        elif what:
            notes.append(what)
        extra["nondeterministic"] = cur.distinct_outputs > 1
        if not base_ok:
            found.append((Verdict.NEW, "no baseline row" if base is None else f"baseline row was {base.status}"))
        else:
            extra.update(_deltas(cur, base))
            if lost_dispatch:
                found.append((Verdict.LOST_DISPATCH,
                              f"dispatcher chose {base.dispatch_path} in the baseline, now "
                              f"{cur.dispatch_path or 'nothing'}"
                              + (f" ({cur.fallback_reason})" if cur.fallback_reason else "")))
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
    eager_speed_only = (verdict == Verdict.SLOWER and ref.mode in ("cold", "cpu")
                        and not settings.gate_eager_speed)
    fails = verdict in FAILING and role != "peer" and not eager_speed_only
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
    """Keys of the rows that carry a LOST_DISPATCH (see ``is_marlin_path``)."""
    by_case: dict[tuple, list[tuple]] = defaultdict(list)
    for k in set(cur) & set(base):
        by_case[k[:-2]].append(k)  # group by (matrix?, case_id)
    flagged: set[tuple] = set()
    for keys in by_case.values():
        lost = [k for k in keys if base[k].status == "ok" and cur[k].status == "ok"
                and is_marlin_path(base[k].dispatch_path) and not is_marlin_path(cur[k].dispatch_path)]
        if not lost:
            continue
        chosen = [k for k in lost if cur[k].path == base[k].dispatch_path]
        chosen = chosen or [k for k in lost if is_marlin_path(cur[k].path) and cur[k].role == "path"]
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
    partial: bool = False,
    current_label: str = "current",
    baseline_label: str = "baseline",
) -> GateResult:
    """Gate ``current`` against ``baseline`` row by row.

    Rows match on (case_id, path, mode), and also on matrix when either side holds more
    than one matrix. ``margins`` are per-key noise margins (from calibration);
    ``partial=True`` ignores baseline cases the current run did not include (a filtered
    run) instead of calling them MISSING. The environments must have been checked by the
    caller (``environment.check_compatible``).
    """
    margins = margins or {}
    by_matrix = len({r.matrix for r in current}) > 1 or len({r.matrix for r in baseline}) > 1
    cur, base = _index(current, by_matrix), _index(baseline, by_matrix)
    if partial:
        cases = {k[:-2] for k in cur}
        base = {k: v for k, v in base.items() if k[:-2] in cases}
    lost = _lost_dispatch_keys(cur, base)

    def judge(k: tuple, c: ResultRow | None, b: ResultRow | None) -> RowVerdict:
        return judge_row(c, b, settings, margin=margins.get(k[-3:], math.nan), lost_dispatch=k in lost)

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
                verdicts[k] = replace(old, reasons=old.reasons + ("re-measurement returned no row",))
                continue
            b = fresh_base.get(k[-3:], base.get(k))
            rv = judge(k, replace(c, matrix=cur[k].matrix), b)
            was = first[k]
            tag = (f"re-measured (first: {was.verdict.value} {was.time_change:+.2%})"
                   if math.isfinite(was.time_change) else "re-measured")
            verdicts[k] = replace(rv, remeasured=True, reasons=rv.reasons + (tag,))
        notes.append(f"re-measured {len(keys)} ambiguous or first-time SLOWER row(s)")
    elif ambiguous:
        notes.append(f"{len(ambiguous)} ambiguous or SLOWER row(s) not re-measured (no re-measure hook)")
    ordered = sorted(verdicts.values(), key=_order)
    return GateResult(tuple(ordered), settings, current_label=current_label,
                      baseline_label=baseline_label, has_baseline=bool(baseline), notes=tuple(notes))


def _order(v: RowVerdict) -> tuple:
    r = v.row
    return (not v.fails, RANK[v.verdict], v.matrix, r.kind, r.N, r.K, r.group_size, r.M,
            v.case_id, v.path, v.mode)


def _split_remeasured(result) -> tuple[list[ResultRow], list[ResultRow]]:
    if (isinstance(result, tuple) and len(result) == 2
            and not isinstance(result[0], ResultRow) and not isinstance(result[1], ResultRow)):
        return list(result[0]), list(result[1])
    return [], list(result)
