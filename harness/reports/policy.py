"""The crossover as a dispatch policy: per shape class the path to dispatch, from measured
runs, merged over machines and models, and the classes whose winner changed.

``build_policy(runs, settings)``: per run, per class (kind, N, K, group, M bucket; the
buckets are the distinct M of the data) the candidates are the correct paths
(``crossover``'s rule: ``role == "path"``, ok, rel_err within the gate) of the gating mode
(graph on a GPU, ``cpu`` for CPU stand-ins); the winner is the fastest median, the lead the
runner-up's median over the winner's minus 1, with a 95% bootstrap interval from both rows'
samples (seeded by the class, so every reader gets the same numbers). A lead whose interval
reaches 0, or under ``policy_min_lead``, is a tie. Runs merge class by class: when the runs
that name a winner outside their noise agree, that is the class's winner (interval: the
widest of theirs); when they name different ones, the class reads ``disagree`` and says
who named what; all ties give a tie.

``winner_changes(current, baseline, settings)``: the classes whose decisive winner in the
baseline is not the current run's decisive winner; the gate gives the new winner's row
WINNER_CHANGED (``reports.gate``). Extension point: ``GATING_MODES``.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..config import Settings
from ..results.environment import Environment
from ..results.policy_file import Policy, PolicyClass, group_label
from ..results.schema import Key, ResultRow
from .crossover import _correct
from .stats import median
from .verdicts import RANK, Verdict, row_fails

#: The modes a policy is made of, in preference: graph on a GPU, cpu for CPU stand-ins.
GATING_MODES = ("graph", "cpu")
_RESAMPLES = 400
ClassKey = tuple[str, int, int, str, int]


@dataclass(frozen=True)
class Reading:
    """One run's reading of one class."""

    winner: str
    runner_up: str
    lead: float
    lo: float
    hi: float
    decisive: bool
    times: Mapping[str, float]
    rows: Mapping[str, ResultRow]
    dispatcher: str


def policy_mode(rows: Sequence[ResultRow]) -> str:
    """The mode a policy of ``rows`` is made of (``GATING_MODES``: graph when there is one)."""
    modes = {r.mode for r in rows}
    return next((m for m in GATING_MODES if m in modes), "graph")


def m_edges(rows: Sequence[ResultRow]) -> tuple[int, ...]:
    """The M buckets of the data: its distinct M values."""
    return tuple(sorted({r.M for r in rows if r.kind != "ppl"}))


def class_of(row: ResultRow, edges: Sequence[int]) -> ClassKey:
    bucket = next((e for e in edges if row.M <= e), edges[-1])
    return (row.kind, row.N, row.K, group_label(row.group_size, row.K), bucket)


def lead_interval(win: ResultRow, other: ResultRow, seed: int) -> tuple[float, float, float]:
    """(lead, lo, hi): ``other``'s median over ``win``'s minus 1 and its 95% bootstrap
    interval (both rows' samples resampled); the point value alone without samples."""
    lead = other.time_us_median / win.time_us_median - 1.0
    a, b = np.asarray(win.samples()), np.asarray(other.samples())
    if len(a) < 3 or len(b) < 3:
        return lead, lead, lead
    rng = np.random.default_rng(seed)
    ma = np.median(rng.choice(a, (_RESAMPLES, len(a))), axis=1)
    mb = np.median(rng.choice(b, (_RESAMPLES, len(b))), axis=1)
    lo, hi = np.percentile(mb / ma - 1.0, [2.5, 97.5])
    return lead, float(lo), float(hi)


def read_classes(rows: Sequence[ResultRow], settings: Settings, mode: str,
                 edges: Sequence[int]) -> dict[ClassKey, Reading]:
    """Every class of ``rows`` in ``mode``: its winner, runner-up and lead."""
    groups: dict[ClassKey, list[ResultRow]] = defaultdict(list)
    for r in rows:
        if r.mode == mode and r.kind != "ppl":
            groups[class_of(r, edges)].append(r)
    out = {}
    for key, members in groups.items():
        ok = sorted((r for r in members
                     if r.role == "path" and _correct(r, settings.rel_err_gate) is None),
                    key=lambda r: (r.time_us_median, r.path))
        dispatcher = next((r.dispatch_path for r in members if r.dispatch_path), "")
        times = {r.path: r.time_us_median for r in ok}
        if not ok:
            out[key] = Reading("", "", math.nan, math.nan, math.nan, False, {}, {}, dispatcher)
            continue
        if len(ok) == 1:
            out[key] = Reading(ok[0].path, "", math.inf, math.inf, math.inf, True, times,
                               {ok[0].path: ok[0]}, dispatcher)
            continue
        seed = zlib.crc32(repr(key).encode())
        lead, lo, hi = lead_interval(ok[0], ok[1], seed)
        decisive = lo > 0 and lead >= settings.policy_min_lead
        out[key] = Reading(ok[0].path, ok[1].path, lead, lo, hi, decisive, times,
                           {r.path: r for r in ok}, dispatcher)
    return out


def merge_class(key: ClassKey, readings: Sequence[tuple[str, Reading]]) -> PolicyClass:
    """One class of the policy from the runs' readings (``(run label, reading)``)."""
    kind, n, k, group, m = key
    per_run = tuple({"run": label, "winner": r.winner, "runner_up": r.runner_up,
                     "lead": _num(r.lead), "lead_lo": _num(r.lo), "lead_hi": _num(r.hi),
                     "decisive": r.decisive} for label, r in readings)
    paths = {p for _, r in readings for p in r.times}
    times = {p: median([r.times[p] for _, r in readings if p in r.times]) for p in sorted(paths)}
    dispatcher = next((r.dispatcher for _, r in readings if r.dispatcher), "")
    named = [r for _, r in readings if r.winner]
    if not named:
        return PolicyClass(kind, n, k, group, m, "none", dispatcher=dispatcher, per_run=per_run)
    decisive = [r for r in named if r.decisive]
    winners = {r.winner for r in decisive}
    if len(winners) > 1:
        return PolicyClass(kind, n, k, group, m, "disagree", times_us=times,
                           dispatcher=dispatcher, per_run=per_run)
    pool = decisive or named
    path = pool[0].winner if decisive else min(times, key=times.get)
    runner = next((r.runner_up for r in pool if r.runner_up), "")
    leads = [r.lead for r in pool if r.winner == path]
    lead = median(leads) if leads else math.nan
    lo = min((r.lo for r in pool if r.winner == path), default=math.nan)
    hi = max((r.hi for r in pool if r.winner == path), default=math.nan)
    return PolicyClass(kind, n, k, group, m, "winner" if decisive else "tie", path, runner,
                       lead, lo, hi, times, dispatcher, per_run)


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def build_policy(runs: Sequence[tuple[str, Environment, Sequence[ResultRow]]],
                 settings: Settings, *, created: str = "") -> Policy:
    """The policy of ``runs`` (label, environment, rows), one arch (``ValueError``
    otherwise), of the production-like rows of their gating mode."""
    if not runs:
        raise ValueError("no run to make a policy of")
    archs = {env.arch for _, env, _ in runs}
    if len(archs) > 1:
        raise ValueError(f"runs of several arches ({', '.join(sorted(archs))}): one policy "
                         "per arch")
    every = [r for _, _, rows in runs for r in rows]
    mode = policy_mode(every)
    edges = m_edges([r for r in every if r.mode == mode])
    if not edges:
        raise ValueError(f"the runs have no timed rows in {mode} mode")
    per_run = [(label, read_classes(rows, settings, mode, edges)) for label, _, rows in runs]
    keys = sorted({k for _, classes in per_run for k in classes})
    classes = tuple(merge_class(k, [(label, c[k]) for label, c in per_run if k in c])
                    for k in keys)
    models = tuple(dict.fromkeys(env.gpu_name for _, env, _ in runs if env.gpu_name))
    sources = tuple({"run": label, "commit": env.commit, "gpu": env.gpu_name,
                     "gpu_uuid": env.gpu_uuid, "date": env.date} for label, env, _ in runs)
    return Policy(next(iter(archs)), models, mode, edges, classes, sources,
                  {"rel_err_gate": settings.rel_err_gate,
                   "policy_min_lead": settings.policy_min_lead}, created)


def winner_changes(current: Sequence[ResultRow], baseline: Sequence[ResultRow],
                   settings: Settings) -> dict[Key, str]:
    """The rows that became a class's winner: per class of the gating mode whose winner
    was decisive in the baseline and is another, decisive, path now, the new winner's
    current row key and why (the WINNER_CHANGED reason)."""
    out: dict[Key, str] = {}
    for mode in GATING_MODES:
        cur = [r for r in current if r.mode == mode]
        base = [r for r in baseline if r.mode == mode]
        if not cur or not base:
            continue
        edges = m_edges(cur + base)
        now, before = (read_classes(cur, settings, mode, edges),
                       read_classes(base, settings, mode, edges))
        for key, r in now.items():
            b = before.get(key)
            if b is None or not (r.decisive and b.decisive) or r.winner == b.winner:
                continue
            row = r.rows[r.winner]
            out[row.key] = (f"the fastest correct path of its class changed: {b.winner} led by "
                            f"{b.lead:+.1%} in the baseline, {r.winner} leads {r.runner_up} by "
                            f"{r.lead:+.1%} [{r.lo:+.1%}, {r.hi:+.1%}] now (dispatch policy, "
                            "docs/measurement.md §17)")
    return out


def with_winner_changes(verdicts: dict, settings: Settings) -> dict:
    """``verdicts`` with WINNER_CHANGED on the rows that became their class's winner
    (``reports.policy.winner_changes``), where nothing of higher priority was found."""
    current = [v.current for v in verdicts.values() if v.current is not None]
    baseline = [v.baseline for v in verdicts.values() if v.baseline is not None]
    changes = winner_changes(current, baseline, settings)
    out = dict(verdicts)
    for k, v in verdicts.items():
        why = changes.get(v.key) if v.current is not None else None
        if why is None:
            continue
        if RANK[v.verdict] > RANK[Verdict.WINNER_CHANGED]:
            out[k] = replace(v, verdict=Verdict.WINNER_CHANGED, reasons=(why, *v.reasons),
                             fails=row_fails(Verdict.WINNER_CHANGED, v.role, v.mode, settings))
        else:
            out[k] = replace(v, reasons=v.reasons + (why,))
    return out
