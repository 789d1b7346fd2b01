"""What the machine factor's benches would have screened at fewer samples a row, replayed
from stored foreign jobs (issue 36's cost: ``projection_min_samples``).

A foreign job measures every gated row once at the baseline's commit on the runner (the
machine factor's benches, ``ab/projection/base-<commit>/``), each row sampled until the
bench's stop rule holds with at least ``projection_min_samples`` samples (10; 5 since
§16.22). The stored samples are every sample taken, in the order taken (up to
``KEEP_SAMPLES``), so the bench at a smaller minimum is replayed exactly: the first n
samples, n the first count from the new minimum at which ``StopRule.reason_to_stop`` says
stop (the time cap is not replayed).
Each factor row is rebuilt from its samples (``stats.with_samples``) and the job's screen
(``projection_step.projected_screen``, as ``project`` calls it) is run again against the
run's own bench rows. The replay at the stored minimum must give the stored screened set
(checked, per run); at the smaller one it prints the rows that would be sent or no longer
sent, with the A/B's stored verdict of each row that has one: a row no longer sent that
the A/B called FASTER or SLOWER is a real change the cheaper factor would have missed.

    python scripts/factor_samples.py RUN [RUN ...] [--min-samples 5]  # RUN: <commit>/sm90

Reads the stored CSVs and json only, on a CPU (docs/measurement.md §16.20).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from harness.config import Settings
from harness.engines.projection_step import projected_screen
from harness.measure.timing import StopRule
from harness.reports.stats import with_samples
from harness.results.store import read_rows

MATRICES = ("production", "swiglu")


def replayed(row, rule: StopRule):
    """``row`` as a bench with ``rule`` would have stopped on its stored samples; None
    where the stored samples end before the rule stops (the row then keeps them all)."""
    s = row.samples()
    for n in range(rule.min_samples, len(s) + 1):
        if rule.reason_to_stop(s[:n], 0.0):
            return with_samples(row, s[:n])
    return None


def factor_rows(run: Path, matrix: str) -> dict:
    """The factor benches' ``ok`` rows of ``matrix``, by key (one commit's reading each)."""
    out = {}
    for csv in sorted(run.glob(f"ab/projection/base-*/*/*/{matrix}.csv")):
        out.update({r.key: r for r in read_rows(csv) if r.status == "ok"})
    return out


def sent(current: dict, factor: dict, settings: Settings) -> set:
    """The keys the foreign job's screen sends to A/B (``projection_step.project``)."""
    cur = [current[k] for k in factor if k in current]
    base = [replace(factor[k], matrix=current[k].matrix) for k in factor if k in current]
    return projected_screen(cur, base, settings)[0]


def replay(run: Path, min_samples: int) -> dict:
    """One run: its stored screened set, the replay at the stored minimum and at
    ``min_samples``, the A/B's stored verdicts, and the samples the factor took (the
    settings are the run's own, from its production json)."""
    meta = json.loads((run / f"{MATRICES[0]}.json").read_text())
    settings = Settings.from_dict(meta["settings"])
    if settings.projection_sample:
        raise SystemExit(f"{run}: its factor measured {settings.projection_sample} rows a "
                         "class, not every row: the screen also used scaled rows, not "
                         "replayed here")
    minimum = settings.projection_min_samples or settings.min_samples   # 0: the bench's own
    stored_rule = StopRule.from_settings(replace(settings, min_samples=minimum))
    new_rule = replace(stored_rule, min_samples=min_samples)
    out = {"run": str(run), "minimum": minimum, "stored": set(), "again": set(),
           "new": set(), "ab": {}, "samples": [0, 0], "unmatched": 0}
    for m in MATRICES:
        current = {r.key: r for r in read_rows(run / f"{m}.csv")}
        factor = factor_rows(run, m)
        if not factor:
            raise SystemExit(f"{run}: no machine-factor rows of {m} under ab/projection "
                             "(not a foreign job?)")
        record = json.loads((run / f"{m}.json").read_text())["ab_confirm"]["rows"]
        out["stored"] |= {(m, k) for k, v in record.items() if v.get("source") != "projected"}
        out["ab"].update({(m, k): v["verdict"] for k, v in record.items()
                          if v.get("source") != "projected"})
        again, fewer = {}, {}
        for k, row in factor.items():
            again[k] = replayed(row, stored_rule) or row
            fewer[k] = replayed(row, new_rule) or row
            out["unmatched"] += again[k].n_samples != row.n_samples
            out["samples"][0] += row.n_samples
            out["samples"][1] += fewer[k].n_samples
        out["again"] |= {(m, "|".join(k)) for k in sent(current, again, settings)}
        out["new"] |= {(m, "|".join(k)) for k in sent(current, fewer, settings)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--min-samples", type=int, default=5)
    args = ap.parse_args(argv)
    if args.min_samples < 3:
        ap.error(f"--min-samples: must be at least 3 (the stop rule's own), got "
                 f"{args.min_samples}")
    bad, totals = 0, {"stored": 0, "new": 0, "SLOWER": 0, "FASTER": 0, "samples": [0, 0]}
    for run in args.runs:
        r = replay(run, args.min_samples)
        added, lost = sorted(r["new"] - r["again"]), sorted(r["again"] - r["new"])
        real_lost = [k for k in lost if r["ab"].get(k) not in (None, "SAME")]
        ok = r["again"] == r["stored"]
        print(f"{run}: stored screen {len(r['stored'])} rows, replay at {r['minimum']}: "
              f"{len(r['again'])} ({'the same set' if ok else 'DIFFERS'}; {r['unmatched']} "
              f"rows' sample counts not reproduced); at {args.min_samples}: {len(r['new'])} "
              f"(+{len(added)} -{len(lost)}, {len(real_lost)} real change(s) lost); factor "
              f"samples {r['samples'][0]} -> {r['samples'][1]}")
        for m, k in lost:
            print(f"  no longer sent: {m} {k} (A/B: {r['ab'].get((m, k), '-')})")
        for m, k in added:
            print(f"  newly sent:     {m} {k}")
        if not ok:       # the screen's code or settings changed since: not counted below
            bad += 1
            continue
        totals["stored"] += len(r["stored"])
        totals["new"] += len(r["new"])
        for k in real_lost:
            totals[r["ab"][k]] += 1
        totals["samples"] = [a + b for a, b in zip(totals["samples"], r["samples"], strict=True)]
    n = len(args.runs) - bad
    print(f"{n} of {len(args.runs)} runs replayed to their stored screen; over those: rows "
          f"sent {totals['stored']} -> {totals['new']} at {args.min_samples} samples, real "
          f"changes no longer sent: {totals['SLOWER']} SLOWER, {totals['FASTER']} FASTER; "
          f"factor samples {totals['samples'][0]} -> {totals['samples'][1]}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
