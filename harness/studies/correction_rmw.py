"""The correction against its read-modify-write floor, per shape class and mode (issue 41).

Any correction applied after an unmodified Marlin reads C and writes it back at least
once, after a dependent launch: the study's ``rmw`` variant measures exactly that (Marlin,
then one kernel that reads C and writes it unchanged), so the excess of a correction over
``rmw``, in percentage points of Marlin alone, is what the correction itself could still
give back. ``rmw_excess_by_class`` tabulates it for the picked variants (the shipped
default, or a pick) per shape class (``harness.kernels.marlin.variants.SHAPE_CLASSES``)
and mode, with every shape in an "all" row; ``rmw_target_checks`` sets issue 41's targets
(``RMW_TARGETS``) against it. Pure Python over the study's row dicts (no GPU), read by
``harness study correction`` and ``scripts/correction_pick.py``.

Extension point: a new target is a key of ``RMW_TARGETS`` (mode, statistic -> pp) and
its check in ``rmw_target_checks``.
"""

from __future__ import annotations

import statistics

from .correction_report import floor_excess

#: Issue 41: the correction's excess over Marlin + rmw, in percentage points of Marlin
#: alone: graph median and every shape (max), eager (cold) median.
RMW_TARGETS = {("graph", "median"): 3.0, ("graph", "max"): 8.0, ("cold", "median"): 5.0}


def rmw_excess_by_class(rows: list[dict], picks: dict[str, dict]) -> list[dict]:
    """Per (shape class, mode), then "all" per mode: shapes, median and max excess over
    rmw (pp) and the worst shape, for ``picks`` (class -> {"variant": ...}); shapes
    without an rmw or empty row left out. [] for a study without rmw rows."""
    ex = [e for e in floor_excess(rows, picks) if e["excess_rmw_pp"] is not None]
    cls = {r["case_id"]: r["shape_class"] for r in rows}
    out = []
    for mode in dict.fromkeys(e["mode"] for e in ex):
        here = [e for e in ex if e["mode"] == mode]
        groups = {c: [e for e in here if cls[e["case_id"]] == c]
                  for c in dict.fromkeys(cls[e["case_id"]] for e in here)}
        for name, sel in [*groups.items(), ("all", here)]:
            worst = max(sel, key=lambda e: e["excess_rmw_pp"])
            out.append({"shape_class": name, "mode": mode, "shapes": len(sel),
                        "variants": sorted({e["variant"] for e in sel}),
                        "median_pp": statistics.median(e["excess_rmw_pp"] for e in sel),
                        "max_pp": worst["excess_rmw_pp"], "max_case": worst["case_id"]})
    return out


def rmw_target_checks(rows: list[dict], picks: dict[str, dict]) -> list[tuple[str, bool, str]]:
    """Issue 41's targets on ``picks``: (name, met, the figure) for each target whose mode
    the study measured with rmw rows."""
    whole = {t["mode"]: t for t in rmw_excess_by_class(rows, picks) if t["shape_class"] == "all"}
    checks = []
    for (mode, stat), limit in RMW_TARGETS.items():
        t = whole.get(mode)
        if t is None:
            continue
        got = t[f"{stat}_pp"]
        where = f" at {t['max_case']}" if stat == "max" else ""
        checks.append((f"excess over rmw, {mode} {stat} <= {limit:g} pp", got <= limit,
                       f"{got:.1f} pp{where} over {t['shapes']} shapes"))
    return checks


def rmw_class_lines(rows: list[dict], picks: dict[str, dict], what: str) -> list[str]:
    """The table and the checks in words: one line per (class, mode), then the targets."""
    lines = [f"{what} over the rmw floor, per class and mode (pp of Marlin alone; median / "
             "max at shape):"] if rows else []
    for t in rmw_excess_by_class(rows, picks):
        lines.append(f"  {t['shape_class']:7s} {t['mode']:5s} {t['shapes']:3d} shapes "
                     f"({', '.join(t['variants'])}): {t['median_pp']:+.1f} / "
                     f"{t['max_pp']:+.1f} at {t['max_case']}")
    for name, ok, value in rmw_target_checks(rows, picks):
        lines.append(f"  {'PASS' if ok else 'FAIL'} {name}: {value}")
    return lines if len(lines) > 1 else []
