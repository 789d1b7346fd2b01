"""Offline planted slowdown on real GPU noise: every path's measured samples scaled by
exactly ``--factor`` in each given run, gated against a calibrated baseline.

    harness study planted [--baselines baselines/sm90] [--matrix production]
        [--factor 1.05] RUN_CSV [RUN_CSV ...]

A run "catches" the slowdown of a path when at least one graph-mode row of that path is
SLOWER (first measurement: no re-measurement offline). Also prints the A/A verdicts of the
unscaled runs. Complements ``harness.studies.gate_study``, whose on-GPU planted sleep
cannot be smaller than one extra kernel node (6-16% on 6-14 µs decode rows). Reads
stored runs only: no GPU, no torch.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from harness.config import load_settings
from harness.reports.gate import evaluate
from harness.results.baseline import load_baseline
from harness.results.store import read_rows


def scaled(rows, path, f):
    """``rows`` with every ok row of ``path`` slowed by the factor ``f`` (samples and median)."""
    out = []
    for r in rows:
        if r.path == path and r.status == "ok":
            smp = [x * f for x in r.samples()]
            r = replace(r, samples_us=";".join(f"{x:.6g}" for x in smp),
                        time_us_median=r.time_us_median * f)
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="harness study planted", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--baselines", default="baselines/sm90")
    p.add_argument("--matrix", default="production")
    p.add_argument("--factor", type=float, default=1.05)
    a = p.parse_args(argv)
    base = load_baseline(a.baselines, [a.matrix])
    s = load_settings("default")
    runs = [read_rows(r) for r in a.runs]
    paths = sorted({r.path for run in runs for r in run if r.role == "path"})
    aa_slower = 0
    for path in paths:
        caught_runs = rows_caught = rows_total = other = 0
        for cur in runs:
            res = evaluate(scaled(cur, path, a.factor), base.rows, s, margins=base.margins,
                           partial=True)
            mine = [v for v in res.verdicts if v.path == path and v.mode == "graph"
                    and v.current is not None and v.current.status == "ok"]
            hit = sum(v.verdict.value == "SLOWER" for v in mine)
            caught_runs += hit > 0
            rows_caught += hit
            rows_total += len(mine)
            other += sum(v.path != path and v.mode == "graph" and v.verdict.value == "SLOWER"
                         and v.fails for v in res.verdicts)
        print(f"{path}: x{a.factor} caught in {caught_runs}/{len(runs)} runs, "
              f"{rows_caught}/{rows_total} "
              f"graph rows SLOWER; SLOWER rows of other paths: {other}")
    for cur in runs:
        res = evaluate(cur, base.rows, s, margins=base.margins, partial=True)
        aa_slower += sum(v.verdict.value == "SLOWER" and v.fails for v in res.verdicts)
    print(f"A/A (unscaled): {aa_slower} failing SLOWER rows over {len(runs)} runs")
    return 0
