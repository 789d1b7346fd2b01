"""Issue 21's floor targets for a given per-class pick, from a stored correction study.

``harness study correction`` evaluates the targets on its own recommendation, which leaves
out the shapes where Marlin itself failed its check (at M = 1024, g128 on the H200 Marlin's
output differs between calls), and (since 2026-12-04) on the shipped ``AUTO_BY_CLASS`` over
every shape, in its Markdown and JSON. This re-reads a stored study's CSV and evaluates the
pick the code ships now or one given with ``--picks``, over every shape measured:

    python scripts/correction_pick.py STUDY/correction_study.csv [--picks decode=wide,...]
        [--markdown TABLE.md]

Prints the per-class median overhead, the targets with PASS/FAIL, and with ``--markdown``
writes the per-shape table (Marlin alone, Marlin + an empty kernel, the pick, the excess
in percentage points, graph and cold mode side by side). A study with ``rmw`` rows (Marlin
+ C read and written back once: the floor of a correction that reads C after Marlin)
adds that floor's median and max excess over Marlin + an empty kernel against issue 21's
targets, and two columns per mode to the table: the rmw floor % and the excess over it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

from harness.kernels.marlin.variants import (
    SHAPE_CLASSES,
    CorrectionVariantError,
    check_variant_name,
)
from harness.studies.correction_report import (
    evaluate_targets,
    floor_excess,
    floor_targets,
    rmw_excess_lines,
    rmw_floor_lines,
    shipped_picks,
)
from harness.studies.correction_rmw import rmw_class_lines


def parse_picks(text: str | None, rows: list[dict]) -> dict[str, dict]:
    """``decode=wide,mid=stream,...`` over the code's AUTO_BY_CLASS (the study's
    ``shipped_picks``: the classes whose shipped variant the study measured) as picks."""
    table = {c: p["variant"] for c, p in shipped_picks(rows).items()}
    for item in filter(None, (text or "").split(",")):
        cls, _, variant = item.partition("=")
        if cls not in {c for c, _, _ in SHAPE_CLASSES}:
            raise SystemExit(f"correction_pick: --picks: {cls!r} is not a shape class")
        try:
            table[cls] = check_variant_name(variant, f"--picks {cls}")
        except CorrectionVariantError as exc:
            raise SystemExit(f"correction_pick: {exc}") from None
    return {cls: {"variant": v} for cls, v in table.items()}


def load_rows(path: str) -> list[dict]:
    """The study's rows (CSV, plain or gzip) as dicts, NaN as None, ``correct`` a bool."""
    if not Path(path).is_file():
        raise SystemExit(f"correction_pick: {path}: no such file (a correction_study.csv)")
    frame = pd.read_csv(path)
    frame["correct"] = frame["correct"].map({True: True, False: False, "True": True,
                                             "False": False})
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def _cell(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[dict], picks: dict[str, dict]) -> str:
    ex = {(e["case_id"], e["mode"]): e for e in floor_excess(rows, picks)}
    marlin = {(r["case_id"], r["mode"]): r["time_us"] for r in rows
              if r["variant"] == "marlin_only"}
    rmw = any(e["rmw_floor_pct"] is not None for e in ex.values())
    extra = " rmw floor % | excess over rmw pp |" if rmw else ""
    lines = [f"| case | variant | Marlin graph us | floor % | overhead % | excess pp |{extra}"
             f" Marlin cold us | floor % | overhead % | excess pp |{extra}",
             "|---|---" + "|---" * (12 if rmw else 8) + "|"]
    for cid in sorted({c for c, _ in ex}, key=lambda c: (int(c[1:].split("-")[0]), c)):
        cells = []
        for mode in ("graph", "cold"):
            e = ex.get((cid, mode))
            cells.append(("| | | |" + " | |" * rmw) if e is None else
                         f"{marlin[(cid, mode)]:.2f} | {e['floor_pct']:.1f} | "
                         f"{e['overhead_pct']:.1f} | {e['excess_pp']:+.1f} |"
                         + (f" {_cell(e['rmw_floor_pct'], '.1f')} |"
                            f" {_cell(e['excess_rmw_pp'], '+.1f')} |" if rmw else ""))
        variant = (ex.get((cid, "graph")) or ex.get((cid, "cold")))["variant"]
        lines.append(f"| {cid} | {variant} | {cells[0]} {cells[1]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="correction_study.csv of `harness study correction`")
    ap.add_argument("--picks", default=None, help="class=variant,... (default AUTO_BY_CLASS)")
    ap.add_argument("--markdown", default=None, help="write the per-shape table here")
    args = ap.parse_args(argv)
    rows = load_rows(args.csv)
    picks = parse_picks(args.picks, rows)
    print("picks: " + ", ".join(f"{c}={p['variant']}" for c, p in picks.items()))
    for cls, pick in picks.items():
        ov = [r["overhead_pct"] for r in rows if r["shape_class"] == cls
              and r["variant"] == pick["variant"] and r["overhead_pct"] is not None]
        if ov:
            print(f"{cls}: {pick['variant']} median overhead {statistics.median(ov):.1f}% "
                  f"over {len(ov)} (shape, mode) rows")
    for name, ok, value in evaluate_targets(rows, picks) + floor_targets(rows, picks):
        print(f"{'PASS' if ok else 'FAIL'}: {name} ({value})")
    for line in (rmw_floor_lines(rows) + rmw_excess_lines(rows, picks, "the pick")
                 + rmw_class_lines(rows, picks, "the pick")):
        print(line)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(markdown(rows, picks))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
