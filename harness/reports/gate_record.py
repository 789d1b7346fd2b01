"""The gate's reading stored with a run, so every later reading can reproduce it.

``write_gate_record(csv_path, result)`` puts the confirmation rows of a gate (the rows it
measured again to confirm a SLOWER or settle an AMBIGUOUS) in ``confirm/<matrix>.csv``
and, under the key ``gate`` of ``<matrix>.json``: the baseline it was gated against, the
exit code, every row's verdict and, per confirmation, the first and final verdicts with
their changes. ``harness report`` and ``harness compare`` replay the stored rows
(``gate.stored_remeasure``) and ``agreement`` checks their verdicts against this record;
``stored_exit_code`` (``harness job``) and ``stored_result`` (``harness merge`` without a
baseline) read the record itself.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from ..errors import EXIT_FAIL, EXIT_NO_BASELINE, EXIT_PASS, worst_exit
from ..results.store import Run, confirm_path, read_meta, write_meta, write_rows
from .gate import PARTIAL_MODES, row_fails
from .verdicts import GateResult, RowVerdict, Verdict, verdict_map


def _finite(x: float) -> float | None:
    """``x``, or None where JSON has no number for it (NaN, inf)."""
    return float(x) if math.isfinite(x) else None


def write_gate_record(csv_path: str | Path, result: GateResult, *,
                      partial: bool | str = False) -> None:
    """Store ``result``'s verdicts and confirmation rows beside the result CSV; ``partial``:
    the gate judged only the cases, paths and modes the run measured (a filtered bench; or
    ``gate.PARTIAL_MODES``: only its modes), so every later reading of the run does the
    same (``stored_partial``)."""
    csv_path = Path(csv_path)
    if result.remeasured:
        write_rows(confirm_path(csv_path), result.remeasured)
    confirmed = {"|".join(v.key): {
        "first": v.first_verdict, "first_change": _finite(v.first_change),
        "final": v.verdict.value, "final_change": _finite(v.time_change),
        "median_us": _finite(v.cur_median_us),
        "samples": v.current.n_samples if v.current is not None else 0,
    } for v in result.verdicts if v.remeasured}
    json_path = csv_path.with_suffix(".json")
    meta = read_meta(json_path)
    failing = Counter(v.verdict.value for v in result.failures)
    gate = {"baseline": result.baseline_label, "has_baseline": result.has_baseline,
            "exit_code": result.exit_code, "failing": dict(sorted(failing.items())),
            "partial": PARTIAL_MODES if partial == PARTIAL_MODES else bool(partial),
            "verdicts": verdict_map(result), "confirmations": confirmed,
            "notes": list(result.notes)}
    write_meta(json_path, replace(meta, extra={**meta.extra, "gate": gate}))


def stored_partial(metas) -> bool | str:
    """How the bench gated the run's matrices: True when any was a filtered run
    (``--paths``, ``--filter``: baseline rows it did not measure were not judged MISSING),
    ``gate.PARTIAL_MODES`` when some timing modes only were measured (``--mode``, the GPU
    job's default), else False."""
    marks = [((getattr(m, "extra", None) or {}).get("gate") or {}).get("partial")
             for m in metas.values()]
    if any(v is True for v in marks):
        return True
    return PARTIAL_MODES if PARTIAL_MODES in marks else False


def stored_verdicts(metas) -> dict[str, str]:
    """The verdicts a bench stored for the run's matrices (``matrix|case|path|mode``)."""
    out: dict[str, str] = {}
    for matrix, meta in metas.items():
        gate = meta.extra.get("gate") if hasattr(meta, "extra") else None
        for key, verdict in (gate or {}).get("verdicts", {}).items():
            out[key if key.count("|") == 3 else f"{matrix}|{key}"] = str(verdict)
    return out


def agreement(result: GateResult, metas) -> str | None:
    """One line comparing ``result`` with the verdicts stored with the run, or None when
    the run stored none (e.g. it was measured with ``--no-compare``)."""
    stored = stored_verdicts(metas)
    if not stored:
        return None
    now = {"|".join((v.matrix, *v.key)): v.verdict.value for v in result.verdicts}
    common = stored.keys() & now.keys()
    differ = sorted(k for k in common if stored[k] != now[k])
    if not differ:
        return f"verdicts agree with the bench's stored gate on all {len(common)} rows"
    first = differ[0]
    return (f"verdicts differ from the bench's stored gate on {len(differ)} of {len(common)} rows "
            f"(first: {first}: stored {stored[first]}, now {now[first]}; another baseline, "
            "preset or setting?)")


def stored_exit_code(gate: dict) -> int:
    """A gated matrix's exit code from its stored gate record (see ``harness.errors``): the
    gate's own exit code (a failing row: 1), and 3 where there was no baseline."""
    if gate.get("exit_code", 0):
        return EXIT_FAIL
    return EXIT_PASS if gate.get("has_baseline", True) else EXIT_NO_BASELINE


def stored_result(run: Run, settings: Settings) -> tuple[GateResult, int]:
    """The verdicts a bench stored with ``run`` as a ``GateResult``, and the run's exit code
    from the records (the worst matrix's ``stored_exit_code``; 3 where a matrix stored no
    gate record: nothing was judged).

    Each row gets its stored verdict (NEW where its matrix stored none); whether it fails
    is ``gate.row_fails`` under ``settings``. Stored verdicts of rows absent from the run
    (MISSING) cannot be shown row by row: a note counts them."""
    gates = {m: (meta.extra.get("gate") or {}) for m, meta in run.metas.items()}
    stored = stored_verdicts(run.metas)
    verdicts, seen = [], set()
    for row in run.rows:
        key = f"{row.matrix}|{row.case_id}|{row.path}|{row.mode}"
        gate = gates.get(row.matrix) or {}
        verdict = Verdict(stored[key]) if key in stored else Verdict.NEW
        seen.add(key)
        why = (f"stored gate record ({gate.get('baseline') or 'no baseline'})" if key in stored
               else "no stored verdict for this row")
        verdicts.append(RowVerdict(
            matrix=row.matrix, case_id=row.case_id, path=row.path, mode=row.mode,
            role=row.role, verdict=verdict, reasons=(why,),
            fails=row_fails(verdict, row.role, row.mode, settings), current=row, baseline=None,
            cur_median_us=row.time_us_median, nondeterministic=row.distinct_outputs > 1))
    notes = [n for g in gates.values() for n in g.get("notes", [])]
    absent = sorted(set(stored) - seen)
    if absent:
        notes.append(f"{len(absent)} stored verdicts name rows absent from the run "
                     f"(first: {absent[0]}: {stored[absent[0]]})")
    codes = [stored_exit_code(gates[m]) if gates.get(m) else EXIT_NO_BASELINE
             for m in run.matrices]
    labels = sorted({str(g.get("baseline")) for g in gates.values() if g.get("baseline")})
    result = GateResult(tuple(verdicts), settings, current_label=run.label,
                        baseline_label=", ".join(labels) or "baseline",
                        has_baseline=any(g.get("has_baseline") for g in gates.values()),
                        notes=tuple(notes))
    return result, worst_exit(codes)
