#!/usr/bin/env python3
# Usage: python3 scripts/planted_slowdown_offline.py RESULT_CSV  (run from the repo root)
"""Offline planted-slowdown check on real H200 noise: scale one path's measured samples by
1.05 in an independent run (c) and gate it against the calibrated sm90 baseline."""
import sys
from dataclasses import replace

from harness.config import load_settings
from harness.reports.baseline import load_baseline
from harness.reports.gate import evaluate
from harness.reports.store import read_rows

base = load_baseline("baselines/sm90", ["production"])
cur = read_rows(sys.argv[1])
s = load_settings("default")

def scaled(rows, path, f):
    out = []
    for r in rows:
        if r.path == path and r.status == "ok":
            smp = [x * f for x in r.samples()]
            r = replace(r, samples_us=";".join(f"{x:.5g}" for x in smp), time_us_median=r.time_us_median * f)
        out.append(r)
    return out

for path in ("fp16_cache", "marlin_asym", "native_int4"):
    res = evaluate(scaled(cur, path, 1.05), base.rows, s, margins=base.margins)
    rows = [v for v in res.verdicts if v.path == path and v.mode == "graph" and v.current is not None and v.current.status == "ok"]
    caught = sum(v.verdict.value == "SLOWER" for v in rows)
    other = [v for v in res.verdicts if v.path != path and v.mode == "graph" and v.verdict.value == "SLOWER"]
    print(f"{path}: planted +5% in graph mode: {caught}/{len(rows)} rows SLOWER; false SLOWER elsewhere (graph): {len(other)}")
res = evaluate(cur, base.rows, s, margins=base.margins)
g = [v for v in res.verdicts if v.mode == "graph" and v.role == "path"]
print("A/A graph rows (paths):", {k: sum(v.verdict.value == k for v in g) for k in ("SAME", "FASTER", "SLOWER", "AMBIGUOUS", "WORSE_ACCURACY")})
