"""Where a foreign job's screen noise comes from, read from stored runs (issue 36's A/B cost).

A foreign job screens each gated graph row by its bench's reading (B, the long first bench)
over the machine factor's reading of the same row at the baseline's commit on the runner
(A). The rows beyond ``ab_screen`` go to A/B. For every row the A/B measured, this prints
the screen's reading, the A/B's verdict and change, and which process was off: the bench's
B against the median of the A/B rounds' B benches, the factor's A against the rounds' A
benches at the same commit. Then, over all runs given, how many rows a flat screen at
2.5%, 3% and 4% would still send, and how many real changes (A/B FASTER or SLOWER) it
would lose.

    python scripts/screen_noise.py RUN [RUN ...]     # RUN: <results>/<commit>/sm90

Reads CSVs and the matrices' json files only (pandas), so it runs on a CPU from the
archives in docs/data (docs/measurement.md §16.19).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

MATRICES = ("production", "swiglu")


def _csvs(paths) -> pd.DataFrame:
    frames = [pd.read_csv(p).assign(source_file=str(p)) for p in paths]
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out = out[(out["status"] == "ok") & (out["mode"] == "graph")].copy()
    out["key"] = out["case_id"] + "|" + out["path"] + "|" + out["mode"]
    return out


def _rounds(run: Path, side: str) -> pd.DataFrame:
    """The A/B rounds' readings of one side (``A`` at any commit, ``B``), shadows left out."""
    paths = [p for p in (run / "ab").glob("*/runs/round*/*/*/sm90/*.csv")
             if p.stem in MATRICES and p.parts[-4].split("@")[0] == side]
    return _csvs(paths)


def readings(run: Path) -> pd.DataFrame:
    """One row per A/B-measured row of a stored foreign job (see the module docstring)."""
    bench = _csvs(run / f"{m}.csv" for m in MATRICES).set_index(["matrix", "key"])
    factor = _csvs(run.glob("ab/projection/base-*/*/sm90/*.csv"))
    a_rounds, b_rounds = _rounds(run, "A"), _rounds(run, "B")
    out = []
    for m in MATRICES:
        record = json.loads((run / f"{m}.json").read_text())["ab_confirm"]["rows"]
        for key, ab in record.items():
            if ab.get("source") == "projected" or (m, key) not in bench.index:
                continue
            a = factor[(factor["matrix"] == m) & (factor["key"] == key)]["time_us_median"]
            ra = a_rounds[a_rounds["key"] == key]["time_us_median"]
            rb = b_rounds[b_rounds["key"] == key]["time_us_median"]
            if len(a) != 1 or ra.empty or rb.empty:
                continue
            b = bench.loc[(m, key), "time_us_median"]
            out.append({"run": str(run), "key": key, "screen": b / a.iloc[0] - 1,
                        "verdict": ab["verdict"], "ab_change": ab["change"],
                        "bench_b_off": b / rb.median() - 1,
                        "factor_a_off": a.iloc[0] / ra.median() - 1})
    return pd.DataFrame(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    args = ap.parse_args(argv)
    df = pd.concat([readings(r) for r in args.runs], ignore_index=True)
    if df.empty:
        print("no A/B-measured rows with a factor reading in the runs given")
        return 2
    pd.set_option("display.width", 200)
    print(df.sort_values("screen").round(4).to_string(index=False))
    noise = df[df["verdict"] == "SAME"]
    real = df[df["verdict"] != "SAME"]
    print(f"\n{len(df)} rows A/B'd in {len(args.runs)} runs: {len(noise)} SAME, "
          f"{len(real)} FASTER or SLOWER")
    b_off, a_off = noise["bench_b_off"].abs(), noise["factor_a_off"].abs()
    print(f"SAME rows: median |bench B off| {b_off.median():.4f}, median |factor A off| "
          f"{a_off.median():.4f}; the bench the farther off in {(b_off > a_off).mean():.0%}")
    for t in (0.025, 0.03, 0.04):
        sent = df["screen"].abs() >= t
        print(f"a flat screen at {t:.1%}: sends {int(sent.sum())} of them "
              f"({int((sent & (df['verdict'] == 'SAME')).sum())} SAME), loses "
              f"{int((~sent & (df['verdict'] != 'SAME')).sum())} of the {len(real)} real")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
