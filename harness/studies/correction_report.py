"""Aggregation and reporting of the correction study (``correction_study``): per-variant
summaries, the fastest-correct recommendation per shape class, the issue-8 targets, and
the CSV / Markdown / JSON outputs. Pure Python over the study's row dicts (no GPU); the
variant and shape-class names come from ``harness.kernels.marlin.variants``.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

from harness.kernels.marlin import variants as _variants
from harness.kernels.marlin.variants import CORRECTIONS, SHAPE_CLASSES, UNCORRECTED

ULP_BUDGET = 2.0
TARGETS = {"graph_median_pct": 5.0, "graph_max_pct": 10.0, "cold_max_pct": 15.0, "floor_ratio": 2.0}
#: Issue 21's targets, relative to the floor (Marlin + an empty kernel, same shape and mode):
#: the graph excess over it in percentage points (median, every shape), the eager overhead
#: (median), and the whole path at M = 1024 against Marlin alone (ratio, both modes).
FLOOR_TARGETS = {"excess_median_pp": 3.0, "excess_max_pp": 6.0, "cold_median_pct": 15.0,
                 "m1024_ratio": 1.15}
COLUMNS = ("case_id", "M", "N", "K", "group_size", "shape_class", "variant", "mode", "status",
           "time_us", "iqr_us", "ci_lo_us", "ci_hi_us", "n_samples", "stop_reason", "calls",
           "copies",
           "l2_cold", "marlin_us", "marlin_us_end", "overhead_us", "overhead_pct", "floor_us",
           "floor_ratio", "marginal_floor_ratio", "host_us", "correct", "max_corr_ulp",
           "p99_corr_ulp", "nonfinite", "rel_err", "deterministic", "error")


def _num(row, key):
    v = row.get(key)
    return float(v) if v not in (None, "") and math.isfinite(float(v)) else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per (variant, mode): shapes measured, median/max overhead %, floor ratio, correctness."""
    out = []
    keys = dict.fromkeys((r["variant"], r["mode"]) for r in rows if r["variant"] != "marlin_only")
    for variant, mode in keys:
        sel = [r for r in rows if r["variant"] == variant and r["mode"] == mode]
        ov = [v for r in sel if (v := _num(r, "overhead_pct")) is not None]
        us = [v for r in sel if (v := _num(r, "overhead_us")) is not None]
        fr = [v for r in sel if (v := _num(r, "floor_ratio")) is not None]
        ulp = [v for r in sel if (v := _num(r, "max_corr_ulp")) is not None]
        out.append({
            "variant": variant, "mode": mode, "shapes": len(ov),
            "errors": sum(1 for r in sel if r["status"] == "error"),
            "incorrect": sum(1 for r in sel if r.get("correct") is False),
            "median_overhead_pct": statistics.median(ov) if ov else None,
            "max_overhead_pct": max(ov) if ov else None,
            "median_overhead_us": statistics.median(us) if us else None,
            "median_floor_ratio": statistics.median(fr) if fr else None,
            "max_corr_ulp": max(ulp) if ulp else None,
        })
    return out


def marlin_failures(rows: list[dict], candidates) -> set[str]:
    """Shapes whose failed checks are Marlin's own, left out of the ranking: Marlin alone
    (or Marlin + a floor: an empty kernel, C read and written back) failed its check there,
    or EVERY candidate did (a failure no correction causes alone, e.g. Marlin's race at
    large M on Hopper)."""
    bad = set()
    for cid in {r["case_id"] for r in rows}:
        sel = [r for r in rows if r["case_id"] == cid]
        floors = [r for r in sel if r["variant"] in UNCORRECTED]
        cand = [r for r in sel if r["variant"] in candidates]
        if any(r.get("correct") is False for r in floors) or (
                cand and all(r.get("correct") is False for r in cand)):
            bad.add(cid)
    return bad


RANK_MODES = ("graph",)     # what the recommendation ranks by: the gate's mode (cold: accuracy)


def recommend(rows: list[dict], candidates, rank_modes=RANK_MODES) -> dict[str, dict]:
    """Per shape class, the variant correct on every shape in every mode (``marlin_failures``
    left out) with the lowest median overhead in ``rank_modes`` (else every mode measured)."""
    classes = dict.fromkeys(r["shape_class"] for r in rows)
    skip = marlin_failures(rows, candidates)
    measured = {r["mode"] for r in rows}
    ranked = tuple(m for m in rank_modes if m in measured) or tuple(sorted(measured))
    picks = {}
    for cls in classes:
        cases = sorted({r["case_id"] for r in rows if r["shape_class"] == cls} - skip)
        best = None
        for v in candidates:
            per_case = []
            for cid in cases:
                sel = [r for r in rows if r["case_id"] == cid and r["variant"] == v]
                vals = [_num(r, "overhead_pct") for r in sel if r["mode"] in ranked]
                if not vals or any(r.get("correct") is not True for r in sel) or None in vals:
                    per_case = None
                    break
                per_case.append(sum(vals) / len(vals))
            if per_case:
                score = statistics.median(per_case)
                if best is None or score < best["score_pct"]:
                    best = {"variant": v, "score_pct": score, "shapes": len(per_case),
                            "ranked_by": list(ranked),
                            "marlin_failures": sorted(c for c in skip if any(
                                r["case_id"] == c and r["shape_class"] == cls for r in rows))}
        if best is not None:
            picks[cls] = best
    return picks


def evaluate_targets(rows: list[dict], picks: dict[str, dict]) -> list[tuple[str, bool, str]]:
    """The issue's targets on the composite 'per class, the recommended variant'."""
    chosen = [r for r in rows
              if r["shape_class"] in picks and r["variant"] == picks[r["shape_class"]]["variant"]]
    res = []
    g = [v for r in chosen if r["mode"] == "graph" and (v := _num(r, "overhead_pct")) is not None]
    if g:
        med, mx = statistics.median(g), max(g)
        res.append(("graph overhead median <= 5%", med <= TARGETS["graph_median_pct"],
                    f"{med:.1f}%"))
        res.append(("graph overhead <= 10% at every shape", mx <= TARGETS["graph_max_pct"],
                    f"max {mx:.1f}%"))
    c = [v for r in chosen if r["mode"] == "cold" and (v := _num(r, "overhead_pct")) is not None]
    if c:
        res.append(("eager within 15% of Marlin at every shape", max(c) <= TARGETS["cold_max_pct"],
                    f"max {max(c):.1f}%"))
    f = [v for r in chosen if (v := _num(r, "floor_ratio")) is not None]
    if f:
        res.append(("correction <= 2x the empty kernel's time (every shape, mode)",
                    max(f) <= TARGETS["floor_ratio"],
                    f"max {max(f):.2f}x, median {statistics.median(f):.2f}x"))
    mf = [v for r in chosen if (v := _num(r, "marginal_floor_ratio")) is not None]
    if mf:
        res.append(("correction <= 2x an empty kernel after Marlin (same shape, mode)",
                    max(mf) <= TARGETS["floor_ratio"],
                    f"max {max(mf):.2f}x, median {statistics.median(mf):.2f}x"))
    skip = marlins_own(rows) & {r["case_id"] for r in chosen}
    u = [v for r in chosen
         if r["case_id"] not in skip and (v := _num(r, "max_corr_ulp")) is not None]
    if u:
        left = f"; left out, Marlin's own failures: {', '.join(sorted(skip))}" if skip else ""
        res.append(("correction within 2 fp16 ULPs of fp64", max(u) <= ULP_BUDGET,
                    f"max {max(u):.2f} ULP{left}"))
    return res


def marlins_own(rows: list[dict]) -> set[str]:
    """Shapes whose failed correction checks the accuracy target leaves out, as Marlin's:
    ``marlin_failures`` over every correction the study measured, but its "every
    candidate failed" rule only where at least two were measured (with one, that rule
    would hide the correction's own failure). The check subtracts Marlin's output of a
    separate call, so Marlin's run-to-run race (quanto #332) reads as a correction error."""
    measured = sorted({r["variant"] for r in rows if r["variant"] in CORRECTIONS})
    return marlin_failures(rows, measured if len(measured) >= 2 else [])


def floor_excess(rows: list[dict], picks: dict[str, dict]) -> list[dict]:
    """Per shape and mode, the picked variant's overhead over Marlin alone, the empty
    kernel's (Marlin + an empty kernel: the floor of any one-kernel correction) and the
    excess = the difference, in percentage points; shapes without both left out. Where
    the study has an ``rmw`` row (Marlin + C read and written back once: the floor of any
    correction after an unmodified Marlin), also its overhead and the excess over it
    (``rmw_floor_pct``, ``excess_rmw_pp``; None without one)."""
    by = {(r["case_id"], r["variant"], r["mode"]): r for r in rows}
    out = []
    for r in rows:
        pick = picks.get(r["shape_class"], {}).get("variant")
        if r["variant"] != pick:
            continue
        floor = by.get((r["case_id"], "empty", r["mode"]))
        ov, fl = _num(r, "overhead_pct"), _num(floor, "overhead_pct") if floor else None
        if ov is None or fl is None:
            continue
        rmw = by.get((r["case_id"], "rmw", r["mode"]))
        rf = _num(rmw, "overhead_pct") if rmw else None
        out.append({"case_id": r["case_id"], "M": int(r["M"]), "mode": r["mode"],
                    "variant": pick, "overhead_pct": ov, "floor_pct": fl,
                    "excess_pp": ov - fl, "rmw_floor_pct": rf,
                    "excess_rmw_pp": None if rf is None else ov - rf})
    return out


def rmw_floor(rows: list[dict]) -> dict[str, dict]:
    """Per mode, the ``rmw`` floor over every shape measured: its overhead % over Marlin
    alone (median, max) and its excess over Marlin + an empty kernel in percentage points
    (median, max and where; shapes with an ``empty`` row): what any correction applied
    after an unmodified Marlin costs at least. {} for a study without rmw rows."""
    by = {(r["case_id"], r["variant"], r["mode"]): r for r in rows}
    out = {}
    for mode in dict.fromkeys(r["mode"] for r in rows if r["variant"] == "rmw"):
        ov, ex = [], []
        for r in rows:
            if r["variant"] != "rmw" or r["mode"] != mode or (o := _num(r, "overhead_pct")) is None:
                continue
            ov.append(o)
            empty = by.get((r["case_id"], "empty", mode))
            if empty is not None and (fl := _num(empty, "overhead_pct")) is not None:
                ex.append((o - fl, r["case_id"]))
        if ov:
            worst = max(ex) if ex else (None, None)
            out[mode] = {"shapes": len(ov), "median_pct": statistics.median(ov),
                         "max_pct": max(ov), "excess_shapes": len(ex),
                         "median_excess_pp": statistics.median(e for e, _ in ex) if ex else None,
                         "max_excess_pp": worst[0], "max_excess_case": worst[1]}
    return out


def _reach(target: float, floor: float) -> str:
    """Where a target stands against the rmw floor's figure."""
    if target >= floor:
        return "above it"
    # rmw reads C back, then writes it; a correction of reductions into C would skip the
    # read, not the launch and the round trip for its inputs (docs/hopper.md 5.6)
    return "BELOW it (no correction that reads and writes C after Marlin can meet it)"


def rmw_floor_lines(rows: list[dict]) -> list[str]:
    """``rmw_floor`` in words, one line per mode, each with issue 21's targets of that
    mode (``FLOOR_TARGETS``) set against the floor; [] for a study without rmw rows."""
    lines = []
    for mode, f in rmw_floor(rows).items():
        text = (f"rmw floor ({mode}, {f['shapes']} shapes): overhead over Marlin alone median "
                f"{f['median_pct']:.1f}%, max {f['max_pct']:.1f}%")
        if f["median_excess_pp"] is not None:
            text += (f"; excess over Marlin + empty kernel median {f['median_excess_pp']:.1f} pp,"
                     f" max {f['max_excess_pp']:.1f} pp at {f['max_excess_case']}")
        if mode == "graph" and f["median_excess_pp"] is not None:
            text += (f"; issue 21's median <= {FLOOR_TARGETS['excess_median_pp']:g} pp is "
                     f"{_reach(FLOOR_TARGETS['excess_median_pp'], f['median_excess_pp'])}, "
                     f"its max <= {FLOOR_TARGETS['excess_max_pp']:g} pp "
                     f"{_reach(FLOOR_TARGETS['excess_max_pp'], f['max_excess_pp'])}")
        elif mode == "cold":
            text += (f"; issue 21's eager median <= {FLOOR_TARGETS['cold_median_pct']:g}% is "
                     f"{_reach(FLOOR_TARGETS['cold_median_pct'], f['median_pct'])}")
        lines.append(text)
    return lines


def rmw_excess_lines(rows: list[dict], picks: dict[str, dict], what: str) -> list[str]:
    """Per mode, the median and max of ``what`` (the picks, e.g. "the shipped default") over
    Marlin + rmw, in percentage points: how far it is from the floor of a correction that
    reads C after Marlin; [] for a study without rmw rows."""
    lines = []
    ex = [e for e in floor_excess(rows, picks) if e["excess_rmw_pp"] is not None]
    for mode in dict.fromkeys(e["mode"] for e in ex):
        sel = [(e["excess_rmw_pp"], e["case_id"]) for e in ex if e["mode"] == mode]
        top = max(sel)
        lines.append(f"{what} over the rmw floor ({mode}, {len(sel)} shapes): median "
                     f"{statistics.median(v for v, _ in sel):.1f} pp, max {top[0]:.1f} pp "
                     f"at {top[1]}")
    return lines


def floor_targets(rows: list[dict], picks: dict[str, dict]) -> list[tuple[str, bool, str]]:
    """Issue 21's targets (``FLOOR_TARGETS``) on the per-class choice."""
    ex = floor_excess(rows, picks)
    res = []
    g = [e["excess_pp"] for e in ex if e["mode"] == "graph"]
    if g:
        worst = max((e for e in ex if e["mode"] == "graph"), key=lambda e: e["excess_pp"])
        res.append(("graph excess over Marlin + empty kernel <= 3 pp (median)",
                    statistics.median(g) <= FLOOR_TARGETS["excess_median_pp"],
                    f"{statistics.median(g):.1f} pp"))
        res.append(("graph excess over Marlin + empty kernel <= 6 pp at every shape",
                    max(g) <= FLOOR_TARGETS["excess_max_pp"],
                    f"max {max(g):.1f} pp at {worst['case_id']}"))
    c = [e["overhead_pct"] for e in ex if e["mode"] == "cold"]
    if c:
        res.append(("eager overhead <= 15% (median)",
                    statistics.median(c) <= FLOOR_TARGETS["cold_median_pct"],
                    f"{statistics.median(c):.1f}%"))
    big = [e for e in ex if e["M"] == 1024]
    if big:
        ratio = 1.0 + max(e["overhead_pct"] for e in big) / 100.0
        res.append(("at M = 1024 the whole path <= 1.15x Marlin alone (both modes)",
                    ratio <= FLOOR_TARGETS["m1024_ratio"], f"max {ratio:.3f}x"))
    return res


def shipped_picks(rows: list[dict]) -> dict[str, dict]:
    """The code's ``AUTO_BY_CLASS`` as picks, for each class whose variant the study
    measured: the targets of the default that ships, over every shape (``recommend``
    leaves out the shapes where Marlin itself failed, e.g. M = 1024 g128 on the H200)."""
    measured = {r["variant"] for r in rows}
    table = _variants.AUTO_BY_CLASS
    return {c: {"variant": table[c]} for c, _, _ in SHAPE_CLASSES if table.get(c) in measured}


def auto_line(picks: dict[str, dict]) -> str:
    """The line to paste; a class the run did not measure keeps the seed's two_kernel."""
    body = ", ".join(f'"{c}": "{picks[c]["variant"] if c in picks else "two_kernel"}"'
                     for c, _, _ in SHAPE_CLASSES)
    return f"AUTO_BY_CLASS = {{{body}}}"


def fmt(v, spec=".1f"):
    return "" if v is None or v == "" else (format(v, spec) if isinstance(v, float) else str(v))


def _pp(v, spec: str) -> str:
    """A table cell: ``v`` formatted, or '-' for a shape without the value."""
    return "-" if v is None else format(v, spec)


def _cell(sel: dict, variant: str) -> str:
    parts = []
    for m in ("cold", "graph"):
        r = sel.get((variant, m))
        val = _num(r, "overhead_pct") if r else None
        mark = "" if not r or r.get("correct") is not False else "!"
        parts.append(f"{val:.0f}{mark}" if val is not None else (r["status"][:5] if r else "-"))
    return " / ".join(parts)


def render_markdown(rows, summary, picks, targets, header: list[str],
                    shipped: tuple[dict, list] | None = None) -> str:
    lines = list(header) + ["", "## Summary per variant and mode", "",
                            "| variant | mode | shapes | errors | incorrect | median overhead % "
                            "| max overhead % "
                            "| median overhead µs | median floor ratio | max corr ULP |",
                            "|---" * 10 + "|"]
    for s in summary:
        lines.append(f"| {s['variant']} | {s['mode']} | {s['shapes']} | {s['errors']} "
                     f"| {s['incorrect']} | "
                     f"{fmt(s['median_overhead_pct'])} | {fmt(s['max_overhead_pct'])} | "
                     f"{fmt(s['median_overhead_us'], '.2f')} "
                     f"| {fmt(s['median_floor_ratio'], '.2f')} | "
                     f"{fmt(s['max_corr_ulp'], '.2f')} |")
    ranked = " + ".join(sorted({m for p in picks.values() for m in p.get("ranked_by", ())})) or "-"
    lines += ["", f"## Recommendation (fastest correct variant per class, by {ranked})", ""]
    lines += [f"- {c}: **{p['variant']}** (median overhead {p['score_pct']:.1f}% "
              f"over {p['shapes']} shapes"
              + (f"; left out, Marlin's own failures: {', '.join(p['marlin_failures'])}"
                 if p.get("marlin_failures") else "") + ")"
              for c, p in picks.items()] or [
                  "- none: no variant was correct and measured in every class"]
    lines += ["", "```python", auto_line(picks), "```", "", "## Targets on that choice", ""]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {name} ({val})" for name, ok, val in targets]
    if shipped and shipped[0]:
        names = ", ".join(f"{c}={p['variant']}" for c, p in shipped[0].items())
        lines += ["", f"## Targets on the shipped default (AUTO_BY_CLASS: {names}; every shape)",
                  ""]
        lines += [f"- {'PASS' if ok else 'FAIL'}: {name} ({val})" for name, ok, val in shipped[1]]
    excess = floor_excess(rows, picks)
    if excess:
        rmw = any(e["rmw_floor_pct"] is not None for e in excess)
        lines += ["", "## Over the floor: the choice against Marlin + an empty kernel (issue 21)",
                  "", "| case | mode | variant | overhead % | floor % | excess (pp) |"
                  + (" rmw floor % | excess over rmw (pp) |" if rmw else ""),
                  "|---" * (8 if rmw else 6) + "|"]
        lines += [f"| {e['case_id']} | {e['mode']} | {e['variant']} | {e['overhead_pct']:.1f} "
                  f"| {e['floor_pct']:.1f} | {e['excess_pp']:+.1f} |"
                  + (f" {_pp(e['rmw_floor_pct'], '.1f')} | {_pp(e['excess_rmw_pp'], '+.1f')} |"
                     if rmw else "") for e in excess]
    rmw_lines = rmw_floor_lines(rows) + rmw_excess_lines(rows, shipped_picks(rows),
                                                         "the shipped default")
    if rmw_lines:
        lines += ["", "## The rmw floor: Marlin + C read and written back once", ""]
        lines += [f"- {line}" for line in rmw_lines]
    variants = list(dict.fromkeys(r["variant"] for r in rows if r["variant"] != "marlin_only"))
    lines += ["", "## Per shape: Marlin alone (µs) and each variant's overhead % (cold / graph)",
              "",
              "| case | class | Marlin µs | " + " | ".join(variants) + " |",
              "|---" * (3 + len(variants)) + "|"]
    for cid in dict.fromkeys(r["case_id"] for r in rows):
        sel = {(r["variant"], r["mode"]): r for r in rows if r["case_id"] == cid}
        any_row = next(iter(sel.values()))
        m_us = " / ".join(fmt(_num(sel[("marlin_only", m)], "time_us"))
                          if ("marlin_only", m) in sel else "-"
                          for m in ("cold", "graph"))
        lines.append(f"| {cid} | {any_row['shape_class']} | {m_us} | "
                     + " | ".join(_cell(sel, v) for v in variants) + " |")
    lines += ["", "`!` = incorrect on that shape (excluded from the recommendation)."]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, rows, extra: dict, header: list[str],
                  rank_modes=RANK_MODES) -> tuple[list, dict, list]:
    summary = summarize(rows)
    picks = recommend(rows, [v for v in CORRECTIONS if any(r["variant"] == v for r in rows)],
                      rank_modes)
    targets = evaluate_targets(rows, picks) + floor_targets(rows, picks)
    shipped = shipped_picks(rows)
    shipped_targets = evaluate_targets(rows, shipped) + floor_targets(rows, shipped)
    with open(out / "correction_study.csv", "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
    (out / "correction_study.md").write_text(render_markdown(
        rows, summary, picks, targets, header, (shipped, shipped_targets)))
    (out / "correction_study.json").write_text(json.dumps(
        {**extra, "summary": summary, "picks": picks, "auto_line": auto_line(picks),
         "targets": [{"target": n, "pass": ok, "value": v} for n, ok, v in targets],
         "shipped": {c: p["variant"] for c, p in shipped.items()},
         "rmw_floor": rmw_floor(rows),
         "shipped_targets": [{"target": n, "pass": ok, "value": v}
                             for n, ok, v in shipped_targets]},
        indent=2, default=str))
    return summary, picks, targets
