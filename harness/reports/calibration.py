"""Noise margins that hold on a machine they were not calibrated on.

Input: N stored A/A runs of one commit (separate processes, best on separate machines).
For every (case, path, mode) key, the runs' medians are taken on a log scale,
``x_r = ln(median_r)``. Model: a run on a NEW machine lands at ``center + e`` where ``e``
is normal with a per-key scale ``sigma`` that holds both the between-machine and the
between-process spread. Per key:

* ``center``: the median of ``x_r`` (the baseline row of ``medoid_rows`` is the run whose
  median is nearest to it, so one low or high process never becomes the reference);
* ``s^2``: the sample variance of ``x_r`` (``n - 1`` degrees of freedom). With 4-6 runs
  that alone is too unsteady to set a margin, so it is *moderated* (shrunk towards the
  pooled variance of its class, as in empirical-Bayes variance moderation):
  ``s_mod^2 = (d0 * s0^2 + (n - 1) * s^2) / (d0 + n - 1)``, where the class is (path,
  mode, time band: < 20 us, 20-200 us, >= 200 us), ``s0^2`` is the median of the class's
  per-key variances divided by the median of chi^2_{n-1} / (n - 1) (unbiased for a
  normal sample, robust to a few wild keys), and ``d0`` = ``prior_df``;
* margin: the one-sided prediction bound of a new run at ``coverage``,
  ``exp(t_{coverage, d0 + n - 1} * s_mod * sqrt(1 + 1/n)) - 1``, floored at ``floor``.

So a key whose runs agreed by chance still gets its class's spread, and a key that moved
gets more; ``coverage`` is the stated per-row probability that an unchanged build on a
new machine stays inside its margin (before the gate's min_effect and its Mann-Whitney
test, which only make a false SLOWER rarer). ``leave_one_machine_out`` checks exactly
that claim on the runs themselves. Pure NumPy/SciPy: no torch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..results.schema import Key, ResultRow
from .ab_confirm import screen_keys
from .gate import evaluate
from .stats import with_samples
from .verdicts import Verdict

#: The defaults ``harness baseline record/calibrate`` use (stored with every calibration).
DEFAULT_COVERAGE = 0.999
DEFAULT_PRIOR_DF = 6.0
TIME_BANDS_US = (20.0, 200.0)


@dataclass(frozen=True)
class KeySpread:
    """One key's calibration: where the runs sit and how far a new machine may land."""

    center_us: float          # exp(median of ln medians)
    runs: int
    machines: int
    sd_log: float             # the key's own standard deviation of ln medians (NaN if n < 2)
    sd_moderated: float       # after moderation towards its class
    margin: float             # relative, one-sided


def time_band(us: float) -> str:
    lo, hi = TIME_BANDS_US
    return f"<{lo:g}us" if us < lo else (f"{lo:g}-{hi:g}us" if us < hi else f">={hi:g}us")


def key_class(key: Key, center_us: float) -> tuple[str, str, str]:
    """(path, mode, time band): keys that share a noise level."""
    return (key[1], key[2], time_band(center_us))


def _scipy_stats():
    import scipy.stats  # heavy: scipy.stats (~0.7 s), only when margins are calibrated

    return scipy.stats


def _t_quantile(coverage: float, df: float) -> float:
    return float(_scipy_stats().t.ppf(coverage, df))


def _chi2_median_ratio(df: int) -> float:
    return float(_scipy_stats().chi2.median(df) / df)


def spreads(
    per_run: Sequence[Mapping[Key, float]], machines: Sequence[str], *,
    coverage: float = DEFAULT_COVERAGE, prior_df: float = DEFAULT_PRIOR_DF, floor: float = 0.0,
) -> dict[Key, KeySpread]:
    """Per-key ``KeySpread`` from run medians (``per_run[i][key]``, us) and each run's
    machine label. Keys timed in fewer than two runs get none."""
    if len(per_run) != len(machines):
        raise ValueError("spreads: one machine label per run is needed")
    if not 0.5 < coverage < 1.0:
        raise ValueError(f"coverage: must be in (0.5, 1), got {coverage!r}")
    if prior_df < 0:
        raise ValueError(f"prior_df: must be >= 0, got {prior_df!r}")
    logs: dict[Key, list[tuple[float, str]]] = defaultdict(list)
    for run, machine in zip(per_run, machines, strict=True):
        for key, med in run.items():
            if math.isfinite(med) and med > 0:
                logs[key].append((math.log(med), machine))
    own: dict[Key, tuple[float, int, int, float]] = {}
    for key, vals in logs.items():
        if len(vals) < 2:
            continue
        x = np.array([v for v, _ in vals])
        own[key] = (float(np.median(x)), len(x), len({m for _, m in vals}),
                    float(np.var(x, ddof=1)))
    # pooled variance per class (per degrees of freedom, so runs of unequal count pool too)
    by_class: dict[tuple, list[float]] = defaultdict(list)
    for key, (center, n, _, var) in own.items():
        by_class[key_class(key, math.exp(center))].append(var / _chi2_median_ratio(n - 1))
    pooled = {c: float(np.median(v)) for c, v in by_class.items()}
    out: dict[Key, KeySpread] = {}
    for key, (center, n, n_mach, var) in own.items():
        s0 = pooled[key_class(key, math.exp(center))]
        df = n - 1
        mod = (prior_df * s0 + df * var) / (prior_df + df)
        t = _t_quantile(coverage, prior_df + df)
        margin = math.expm1(t * math.sqrt(mod * (1.0 + 1.0 / n)))
        out[key] = KeySpread(math.exp(center), n, n_mach, math.sqrt(var), math.sqrt(mod),
                             max(floor, margin))
    return out


def run_medians(rows: Sequence[ResultRow], matrix: str | None = None) -> dict[Key, float]:
    """Median per key of a run's ``ok`` rows (of ``matrix`` when given)."""
    return {r.key: r.time_us_median for r in rows
            if r.status == "ok" and (matrix is None or r.matrix == matrix)
            and math.isfinite(r.time_us_median)}


def medoid_rows(runs: Sequence[Sequence[ResultRow]]) -> tuple[list[ResultRow], dict[Key, int]]:
    """One row per key: from the run whose median is nearest the runs' median (on a log
    scale; ties go to the earlier run). A key with no ``ok`` row anywhere takes the first
    run's row. Returns the rows and, per key, the index of the run it came from."""
    by_key: dict[Key, list[tuple[int, ResultRow]]] = defaultdict(list)
    order: list[Key] = []
    for i, rows in enumerate(runs):
        for r in rows:
            if r.key not in by_key:
                order.append(r.key)
            by_key[r.key].append((i, r))
    out, source = [], {}
    for key in order:
        group = by_key[key]
        ok = [(i, r) for i, r in group if r.status == "ok" and r.time_us_median > 0
              and math.isfinite(r.time_us_median)]
        if not ok:
            i, r = group[0]
        else:
            center = float(np.median([math.log(r.time_us_median) for _, r in ok]))
            i, r = min(ok, key=lambda ir: (abs(math.log(ir[1].time_us_median) - center), ir[0]))
        out.append(r)
        source[key] = i
    return out, source


# ---------------------------------------------------------------- where runs came from
def machine_label(env) -> str:
    """Which machine a run ran on: its boot id (a fresh machine has a new one), else host
    and GPU uuid; "" when the run records neither."""
    extra = getattr(env, "extra", {}) or {}
    boot = getattr(env, "boot_id", "") or extra.get("boot_id", "")
    if boot:
        return f"boot:{boot}"
    host = getattr(env, "host", "") or ""
    uuid = getattr(env, "gpu_uuid", "") or extra.get("gpu_uuid", "")
    return f"{host}/{uuid}" if (host or uuid) else ""


def run_identity(env, created: str = "") -> dict[str, str]:
    """How a baseline names a source run: commit, GPU uuid, host, boot id and date (never
    a local path)."""
    extra = getattr(env, "extra", {}) or {}
    ident = {"commit": env.commit, "gpu": env.gpu_name,
             "gpu_uuid": getattr(env, "gpu_uuid", "") or extra.get("gpu_uuid", ""),
             "host": env.host, "boot_id": getattr(env, "boot_id", "") or extra.get("boot_id", ""),
             "date": env.date or created, "machine": machine_label(env)}
    if extra.get("gpu_uuids"):           # a run sharded over several GPUs names them all
        ident["gpu_uuids"] = extra["gpu_uuids"]
    return ident


def machines_of(envs: Sequence) -> list[str]:
    """A machine label per run; a run with no identity counts as a machine of its own."""
    return [machine_label(e) or f"run{i}" for i, e in enumerate(envs)]


# ---------------------------------------------------------------- leave one machine out
@dataclass(frozen=True)
class HoldOut:
    """One held-out machine's run gated against a baseline and margins made without it."""

    machine: str
    run: int
    train_runs: int
    train_machines: int
    gated: int                      # rows judged on speed (the gating modes, ok on both sides)
    false_slower: int               # failing SLOWER verdicts of the unchanged build
    faster: int                     # FASTER verdicts of the unchanged build (do not fail)
    worst_ratio: float              # max over rows of (change / threshold)
    planted: Mapping[str, tuple[int, int, int]]   # path -> (caught, affected, other rows failing)
    screened: int = 0               # rows of the unchanged build the A/B screen sends to A/B
    planted_screened: Mapping[str, int] = field(default_factory=dict)  # path -> affected rows


def leave_one_machine_out(
    runs: Sequence[Sequence[ResultRow]], machines: Sequence[str], settings, *,
    coverage: float = DEFAULT_COVERAGE, prior_df: float = DEFAULT_PRIOR_DF,
    planted: float = 0.05, gate_modes: Sequence[str] = ("graph",), screen: float | None = None,
) -> list[HoldOut]:
    """For each machine X: baseline rows (``medoid_rows``) and margins (``spreads``) from
    the runs of the other machines; each run of X gated against them (speed verdicts in
    ``gate_modes``), then again with every sample of one path at a time multiplied by
    ``1 + planted`` (a planted slowdown): how many of that path's gated rows fail SLOWER,
    and how many other rows fail. ``screen`` (the ``ab_screen`` setting): also count the
    rows the job's A/B screen would send to a same-machine A/B (moved beyond ``screen``,
    no margins), of the unchanged build and of each planted path."""
    screened = (replace(settings, ab_screen=screen) if screen else None)

    def flagged(rows, base) -> list[Key]:
        return (sorted(screen_keys(rows, base, screened, partial=True))
                if screened is not None else [])
    out: list[HoldOut] = []
    for x in dict.fromkeys(machines):
        train = [i for i, m in enumerate(machines) if m != x]
        if len(train) < 2:
            continue
        base_rows, _ = medoid_rows([runs[i] for i in train])
        margins = {k: s.margin for k, s in spreads(
            [run_medians(runs[i]) for i in train], [machines[i] for i in train],
            coverage=coverage, prior_df=prior_df, floor=settings.noise_margin_floor).items()}
        for i in (j for j, m in enumerate(machines) if m == x):
            cur = [r for r in runs[i] if r.mode in gate_modes]
            base = [r for r in base_rows if r.mode in gate_modes]
            res = evaluate(cur, base, settings, margins=margins, partial=True)
            speed = [v for v in res.verdicts if v.current is not None and v.baseline is not None
                     and v.current.status == "ok" and v.baseline.status == "ok"]
            ratios = [v.time_change / v.threshold for v in speed
                      if math.isfinite(v.time_change) and v.threshold > 0]
            plants: dict[str, tuple[int, int, int]] = {}
            plant_screened: dict[str, int] = {}
            for path in sorted({r.path for r in cur if r.role == "path" and r.status == "ok"}):
                slowed = [with_samples(r, [s * (1 + planted) for s in r.samples()])
                          if r.path == path and r.status == "ok" and r.samples() else r
                          for r in cur]
                plant_screened[path] = sum(k[1] == path for k in flagged(slowed, base))
                pres = evaluate(slowed, base, settings, margins=margins, partial=True)
                hit = [v for v in pres.verdicts if v.path == path and v.baseline is not None
                       and v.baseline.status == "ok" and v.current is not None
                       and v.current.status == "ok"]
                caught = sum(v.verdict == Verdict.SLOWER and v.fails for v in hit)
                others = sum(v.fails for v in pres.verdicts if v.path != path)
                plants[path] = (caught, len(hit), others)
            out.append(HoldOut(
                machine=x, run=i, train_runs=len(train),
                train_machines=len({machines[j] for j in train}),
                gated=len(speed),
                false_slower=sum(v.verdict == Verdict.SLOWER and v.fails for v in speed),
                faster=sum(v.verdict == Verdict.FASTER for v in speed),
                worst_ratio=max(ratios) if ratios else math.nan, planted=plants,
                screened=len(flagged(cur, base)), planted_screened=plant_screened))
    return out
