"""What Marlin pays for extra output columns: the timing side of scripts/asum_fp16_precision.py.

The per-column (G = 1) correction could take its row sums from unmodified Marlin itself:
pack the weight with extra columns of ones (code 9 at scale 1), so that Marlin's output
column N is a_sum[M] (fp16: within 1.45 ULP of exact on every per-column production shape,
scripts/asum_fp16_precision.py), and the correction becomes one kernel after Marlin that
reads C and writes it once, as the ``rmw`` floor does, with no group-sum kernel, side
stream or join. Marlin needs N % 128 == 0 (N % 256 at M > 16), so the extra columns are
128 or 256, and the cost of the design over the rmw floor is about Marlin(N + extra) -
Marlin(N). This measures those, through the correction study's own machinery
(``harness.studies.correction_bench.Study.measure_case``: the same copies, timers and stop
rule), on the GPU:

    python3 scripts/marlin_extra_columns.py [--filter EXPR] [--extra 128,256]
        [--modes graph] [--out CSV]

Per case and extra: Marlin's time at N and at N + extra, the increase in % of Marlin at N,
and the rmw floor's own overhead at N for scale. Rows where Marlin does not take N + extra
(M > 16 with 128) are skipped and said so.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import pandas as pd

from harness.cases import MATRICES
from harness.cases.data import case_data
from harness.studies.correction_bench import Study, marlin_accepts


def _marlin_us(rows: list[dict], variant: str, mode: str):
    for r in rows:
        if r["variant"] == variant and r["mode"] == mode and r.get("status") == "ok":
            return r["time_us"]
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--matrix", default="production")
    p.add_argument("--filter", default="group_size == K and M <= 16")
    p.add_argument("--extra", default="128,256")
    p.add_argument("--modes", default="graph")
    p.add_argument("--max-copies", type=int, default=256)
    p.add_argument("--out", default=None, help="CSV of every row")
    a = p.parse_args(argv)
    a.modes = [m for m in a.modes.split(",") if m]
    a.quick = False
    extras = [int(x) for x in a.extra.split(",") if x]
    study = Study(a, lambda s: print(s, flush=True))
    cases = [c for c in MATRICES.cases(a.matrix, a.filter) if marlin_accepts(c) is None]
    if not cases:
        print(f"marlin_extra_columns: no case of {a.matrix!r} passes {a.filter!r}",
              file=sys.stderr)
        return 2
    out = []
    for case in cases:
        data = case_data(case)
        base = study.measure_case(case, data.weight, data.A, ["marlin_only", "rmw"])
        for extra in extras:
            wide = replace(case, N=case.N + extra)
            if marlin_accepts(wide) is not None:
                print(f"{case.id}: +{extra} columns skipped ({marlin_accepts(wide)})")
                continue
            rows = study.measure_case(wide, case_data(wide).weight, data.A, ["marlin_only"])
            for mode in a.modes:
                m0 = _marlin_us(base, "marlin_only", mode)
                m1 = _marlin_us(rows, "marlin_only", mode)
                rmw = _marlin_us(base, "rmw", mode)
                rec = {"case_id": case.id, "M": case.M, "N": case.N, "K": case.K, "mode": mode,
                       "extra": extra, "marlin_us": m0, "marlin_extra_us": m1, "rmw_us": rmw}
                if m0 and m1:
                    rec["extra_pct"] = (m1 / m0 - 1) * 100
                if m0 and rmw:
                    rec["rmw_pct"] = (rmw / m0 - 1) * 100
                out.append(rec)
                print(f"{case.id:26s} {mode:5s} +{extra:3d} cols: Marlin {m0:7.2f} -> {m1:7.2f} us "
                      f"({rec.get('extra_pct', float('nan')):+5.1f}%), rmw floor "
                      f"{rec.get('rmw_pct', float('nan')):+5.1f}%", flush=True)
    df = pd.DataFrame(out)
    if a.out:
        df.to_csv(a.out, index=False)
    if not df.empty:
        for (mode, extra), part in df.groupby(["mode", "extra"]):
            print(f"{mode} +{extra}: Marlin's increase median {part['extra_pct'].median():+.1f}%, "
                  f"max {part['extra_pct'].max():+.1f}% over {len(part)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
