"""What a dispatch strategy costs against the measured policy: per class and in total,
over a workload's mix of M.

A strategy names a path per class: ``dispatcher rules`` (what the dispatcher model chose
for the class's case: TinyLoop's hand-written rules, Marlin when BT >= 16, K and N
multiples of 128, the arch allowed; a SwiGLU pair's fused native kernel), ``always
fp16_cache``, ``always Marlin`` (``marlin_asym`` where it has a correct time, else the
native INT4 kernel TinyLoop falls back to), and the ``policy`` itself. A class's regret is
the strategy's time minus the policy's best time (the winner's; a tie's faster path; the
fastest of a class the runs disagree on). The total, per mix, weighs each class by its M's
share of a workload (``MIXES``, stated there), every shape counting alike:
regret % = sum_c w(M_c) (t_strategy,c - t_best,c) / sum_c w(M_c) t_best,c x 100.
A class where a strategy's path has no correct time is left out of that strategy's
totals and counted in ``missing``.

Extension point: ``MIXES`` (a workload = M bucket -> weight) and ``STRATEGIES``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from ..results.policy_file import Policy, PolicyClass

#: The workloads the totals are weighed by: per M bucket, its share of the GEMM calls.
#: decode-heavy: a serving mix, mostly single-token steps; prefill-heavy: long prompts.
MIXES: dict[str, dict[int, float]] = {
    "decode-heavy": {1: 0.50, 16: 0.20, 32: 0.10, 64: 0.08, 128: 0.05, 256: 0.04, 1024: 0.03},
    "prefill-heavy": {1: 0.05, 16: 0.05, 32: 0.05, 64: 0.10, 128: 0.15, 256: 0.20, 1024: 0.40},
}
MARLIN, FP16, NATIVE = "marlin_asym", "fp16_cache", "native_int4"


def _rules(c: PolicyClass) -> str:
    return c.dispatcher


def _fp16(c: PolicyClass) -> str:
    return FP16


def _marlin(c: PolicyClass) -> str:
    return MARLIN if MARLIN in c.times_us else NATIVE


def _policy(c: PolicyClass) -> str:
    return best_path(c)


#: name -> the path the strategy dispatches for a class.
STRATEGIES: dict[str, Callable[[PolicyClass], str]] = {
    "dispatcher rules": _rules, "always fp16_cache": _fp16, "always Marlin": _marlin,
    "policy": _policy,
}


def best_path(c: PolicyClass) -> str:
    """The policy's path of a class: its winner or tie path, else its fastest time."""
    if c.path:
        return c.path
    return min(c.times_us, key=c.times_us.get) if c.times_us else ""


@dataclass(frozen=True)
class Regret:
    """The regret table (one row per class and strategy) and the totals."""

    rows: pd.DataFrame
    totals: Mapping[tuple[str, str], float]          # (strategy, mix) -> regret %
    missing: Mapping[str, int]                        # strategy -> classes left out

    def totals_frame(self) -> pd.DataFrame:
        names = list(STRATEGIES)
        return pd.DataFrame([{"strategy": s, **{f"{m} regret %": self.totals[(s, m)]
                                                for m in MIXES},
                              "classes without a correct time": self.missing.get(s, 0)}
                             for s in names])


def regret(policy: Policy, mixes: Mapping[str, Mapping[int, float]] = MIXES) -> Regret:
    """Each strategy's regret per class and, per mix, in percent of the policy's time."""
    records = []
    num = {(s, m): 0.0 for s in STRATEGIES for m in mixes}
    den = {(s, m): 0.0 for s in STRATEGIES for m in mixes}
    missing: dict[str, int] = {}
    for c in policy.classes:
        best = best_path(c)
        t_best = c.times_us.get(best, math.nan)
        if not math.isfinite(t_best):
            continue
        for name, pick in STRATEGIES.items():
            path = pick(c)
            t = c.times_us.get(path, math.nan)
            records.append({"class": c.label, "kind": c.kind, "N": c.N, "K": c.K,
                            "group": c.group, "M": c.M, "policy": best, "policy µs": t_best,
                            "strategy": name, "path": path, "µs": t,
                            "regret µs": t - t_best, "regret %": (t / t_best - 1.0) * 100})
            if not math.isfinite(t):
                missing[name] = missing.get(name, 0) + 1
                continue
            for mix, weights in mixes.items():
                w = weights.get(c.M, 0.0)
                num[(name, mix)] += w * (t - t_best)
                den[(name, mix)] += w * t_best
    totals = {k: (num[k] / den[k] * 100 if den[k] > 0 else math.nan) for k in num}
    return Regret(pd.DataFrame(records), totals, missing)


def per_class_frame(table: Regret, strategies: Sequence[str] = ("dispatcher rules",)
                    ) -> pd.DataFrame:
    """One row per class: the policy's path and time, and per strategy its path and regret %."""
    df = table.rows
    if df.empty:
        return df
    wide = df[df.strategy == strategies[0]][["class", "M", "policy", "policy µs"]].copy()
    for s in strategies:
        part = df[df.strategy == s].set_index("class")
        wide[f"{s}: path"] = wide["class"].map(part["path"])
        wide[f"{s}: regret %"] = wide["class"].map(part["regret %"])
    return wide.reset_index(drop=True)
