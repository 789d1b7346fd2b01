"""Comparing two stored result sets: B gated against A (A is the baseline side).

Torch-free and git-free: the rows are already measured. ``compare_runs`` applies the
environment policy to the two sides (``results.environment.check_gate_environment``, A
as the baseline: two GPU models of one arch are judged on accuracy, not on timing),
gates B against A (``gate.evaluate``) with the noise margins it is given and the A
side's own calibrated margins when A is a stored baseline, and puts the environment
warnings first among the result's notes (the report header).

Helpers for sides measured in several rounds (``harness compare`` on git revisions,
``harness.engines.compare``): ``pool_rows`` pools the rounds of one side (samples
concatenated) and ``round_margins`` turns their A/A spread into per-case noise margins;
``undecided`` names the rows that more rounds could decide, and ``extended_margins`` gives
those rows, once measured in more rounds, the standard error of the rounds' means as their
margin.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from ..config import Settings
from ..results.environment import (
    check_gate_environment,
    measured_settings,
    warning_lines,
    with_env_warnings,
)
from ..results.schema import Key, ResultRow
from ..results.store import Run
from .gate import evaluate, row_fails
from .stats import mean_difference_margins, mean_difference_se, noise_margins, with_samples
from .verdicts import GateResult, Remeasure, Verdict


def pool_rows(runs: Sequence[Sequence[ResultRow]]) -> list[ResultRow]:
    """One row per key from several runs: samples concatenated; a non-ok row wins."""
    by_key: dict[tuple, list[ResultRow]] = defaultdict(list)
    for rows in runs:
        for r in rows:
            by_key[(r.matrix, *r.key)].append(r)
    out = []
    for group in by_key.values():
        bad = [r for r in group if r.status != "ok"]
        if bad or len(group) == 1:
            out.append(bad[0] if bad else group[0])
            continue
        samples = [s for r in group for s in r.samples()]
        out.append(with_samples(group[0], samples) if samples else group[0])
    return out


def _medians(rows: Sequence[ResultRow]) -> dict[Key, float]:
    return {r.key: r.time_us_median for r in rows if r.status == "ok"}


def round_margins(rounds: Sequence[Sequence[ResultRow]], floor: float) -> dict[Key, float]:
    """Noise margins from a side's own rounds (A/A), when there are at least two."""
    return noise_margins([_medians(r) for r in rounds], floor) if len(rounds) >= 2 else {}


def undecided(result: GateResult, settings: Settings,
              a_rounds: Sequence[Sequence[ResultRow]] = (),
              b_rounds: Sequence[Sequence[ResultRow]] = ()) -> list[Key]:
    """Gating rows (ok on both sides) that more rounds could decide:

    * left SAME or AMBIGUOUS while their median moved up beyond ``settings.ab_screen``: a
      slowdown there may be real but hidden by the row's noise (its margin, from one
      round's spread, can exceed min_effect) or by too few samples;
    * given the rounds of both sides (``a_rounds``, ``b_rounds``), read SAME, AMBIGUOUS,
      SLOWER or a verdict above the speed call (``OVERLAYS``) with a change within
      ``settings.ab_undecided_se`` standard errors of the difference of the rounds' means
      (``stats.mean_difference_se``) of ``min_effect``: three processes a side that
      disagree by a few percent put a row's reading on either side of the 2% line by
      chance (a +2.4% SLOWER of an unchanged path, a 3% slowdown read +0.9%:
      docs/measurement.md §9.15).

    More rounds of these rows, judged by ``extended_margins``, decide them."""
    se = {}
    if settings.ab_undecided_se and a_rounds and b_rounds:
        se = {k: v[0] for k, v in mean_difference_se(
            [_medians(r) for r in a_rounds], [_medians(r) for r in b_rounds]).items()}
    line = math.log1p(settings.min_effect)

    def close(v) -> bool:
        return (v.key in se and v.verdict != Verdict.FASTER
                and abs(math.log1p(v.time_change) - line) < settings.ab_undecided_se * se[v.key])
    return [v.key for v in result.verdicts
            if v.verdict in (Verdict.SAME, Verdict.AMBIGUOUS, Verdict.SLOWER, *OVERLAYS)
            and v.current is not None and v.current.status == "ok"
            and math.isfinite(v.time_change) and v.time_change > -1
            and row_fails(Verdict.SLOWER, v.role, v.mode, settings)
            and ((v.verdict in (Verdict.SAME, Verdict.AMBIGUOUS, Verdict.WINNER_CHANGED)
                  and v.time_change > settings.ab_screen) or close(v))]


#: Verdicts that outrank a row's speed call while the row was timed (its change, p-value
#: and threshold kept): the A/B reads the speed call beneath them (``ab_pending.reading_of``)
OVERLAYS = (Verdict.WINNER_CHANGED, Verdict.WORSE_ACCURACY, Verdict.LESS_ACCURATE,
            Verdict.NONDETERMINISTIC, Verdict.LOST_DISPATCH)


def extended_margins(a_rounds: Sequence[Sequence[ResultRow]],
                     b_rounds: Sequence[Sequence[ResultRow]], keys: Sequence[Key],
                     settings: Settings) -> dict[Key, float]:
    """The margins of ``keys`` measured in every round of both sides: the one-sided
    ``settings.alpha`` bound of the difference of the rounds' means
    (``stats.mean_difference_margins``), at least ``settings.noise_margin_floor``."""
    wanted = set(keys)

    def medians(rounds):
        return [{k: m for k, m in _medians(r).items() if k in wanted} for r in rounds]
    return mean_difference_margins(medians(a_rounds), medians(b_rounds), settings.alpha,
                                   settings.noise_margin_floor)


def stored_margins(run: Run) -> dict[Key, float]:
    """The noise margins a baseline json carries (``noise_margins``), read as a run."""
    out: dict[Key, float] = {}
    for meta in run.metas.values():
        raw = meta.extra.get("noise_margins") or {}
        for text, value in (raw.items() if isinstance(raw, dict) else ()):
            parts = str(text).split("|")
            if len(parts) == 3 and isinstance(value, (int, float)):
                out[(parts[0], parts[1], parts[2])] = float(value)
    return out


def side_settings(run: Run) -> dict:
    """The settings a stored side was measured with (``measured_settings`` of its json);
    {} without one, or when its matrices were measured with different settings."""
    found = [measured_settings(m.settings, m.extra) for m in run.metas.values()]
    return found[0] if found and all(f == found[0] for f in found) else {}


def merge_margins(*sources: Mapping[Key, float]) -> dict[Key, float]:
    """Per key the largest margin any source gives."""
    out: dict[Key, float] = {}
    for margins in sources:
        for k, v in margins.items():
            out[k] = max(v, out.get(k, 0.0))
    return out


def compare_runs(
    a_rows: Sequence[ResultRow], b_rows: Sequence[ResultRow], run_a: Run, run_b: Run,
    settings: Settings, *, a_label: str, b_label: str, margins: Mapping[Key, float] | None = None,
    a_stored: bool = False, remeasure: Remeasure | None = None, notes: Sequence[str] = (),
    strict_env: bool = False, echo: Callable[[str], None] = print, partial: bool | str = False,
) -> GateResult:
    """Gate ``b_rows`` against ``a_rows`` (``partial``: A's rows that B did not measure are
    not judged, as for a filtered bench); ``run_a`` / ``run_b`` give each side's
    environment and settings (for a measured side: its first round).

    Refused sides raise ``IncompatibleBaselineError``; the warnings are echoed and lead
    the result's notes. Two machines of one GPU model are allowed; two GPU models of one
    arch are compared on accuracy, NaN, dispatch and determinism, their timing rows
    TIMING_NOT_COMPARABLE. ``strict_env``
    refuses on any warning. ``a_stored``: A was read from disk, so the noise margins
    its json carries (a baseline's) apply as well. ``notes`` (how ``margins`` were
    obtained) are appended to the result's own when there are margins. When each side
    holds one matrix, A's rows take B's matrix name, so two differently named matrices
    still pair up.
    """
    for matrix in sorted(set(run_a.metas) & set(run_b.metas)):   # each matrix's own record
        ma, mb = run_a.metas[matrix], run_b.metas[matrix]
        check_gate_environment(ma.environment, mb.environment,
                               measured_settings(ma.settings, ma.extra),
                               measured_settings(mb.settings, mb.extra), strict=strict_env,
                               what=f"A side ({a_label}, {matrix})",
                               current=f"B side ({b_label}, {matrix})")
    env = check_gate_environment(run_a.environment, run_b.environment, side_settings(run_a),
                                 side_settings(run_b), strict=strict_env,
                                 what=f"A side ({a_label})", current=f"B side ({b_label})")
    for line in warning_lines("harness compare", env.warnings):
        echo(line)
    stored = stored_margins(run_a) if a_stored else {}
    notes = tuple(notes) if margins else ()
    notes += ("noise margins of the A side's baseline json",) if stored else ()
    margins = merge_margins(margins or {}, stored)
    a_rows, b_rows = list(a_rows), list(b_rows)
    if len({r.matrix for r in a_rows}) == 1 and len({r.matrix for r in b_rows}) == 1:
        a_rows = [replace(r, matrix=b_rows[0].matrix) for r in a_rows]
    result = evaluate(b_rows, a_rows, settings, margins=margins, remeasure=remeasure,
                      partial=partial, baseline_label=f"A: {a_label}",
                      current_label=f"B: {b_label}",
                      timing_reason=env.timing_reason)
    if notes:
        result = replace(result, notes=result.notes + notes)
    return with_env_warnings(result, env.warnings)
