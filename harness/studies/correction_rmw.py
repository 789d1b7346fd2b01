"""The correction against its read-modify-write floor, per shape class and mode (issue 41).

Any correction applied after an unmodified Marlin reads C and writes it back at least
once, after a dependent launch: the study's ``rmw`` variant measures exactly that (Marlin,
then one kernel that reads C and writes it unchanged), so the excess of a correction over
``rmw``, in percentage points of Marlin alone, is what the correction itself could still
give back. ``rmw_excess_by_class`` tabulates it for the picked variants (the shipped
default, or a pick) per shape class (``harness.kernels.marlin.variants.SHAPE_CLASSES``)
and mode, with every shape in an "all" row; ``rmw_target_checks`` sets issue 41's targets
(``RMW_TARGETS``) against it. Issue 41 holds the SwiGLU pairs to the same bounds against
their own rmw: a pair case runs its path's GEMM twice (gate, up) and then SiLU x mul
(``harness.kernels.swiglu_pair.PairPath``), so its correction's excess over its own floor
(two Marlin + rmw calls), in pp of its Marlin time, is at most its GEMM's wherever the
pair's two calls cost what two calls of its GEMM do (SiLU x mul only adds to the pair's
time): the GEMM's rows bound it. Every pair's GEMM is a production shape, so a production study
reads the pairs too: one more row per mode, "swiglu" (``swiglu_shapes``), and its checks.
Pure Python over the study's row dicts (no GPU), read by ``harness study correction`` and
``scripts/correction_pick.py``.

Extension point: a new target is a key of ``RMW_TARGETS`` (mode, statistic -> pp) and
its check in ``rmw_target_checks``.
"""

from __future__ import annotations

import statistics

from harness.cases import MATRICES

from .correction_report import floor_excess

#: Issue 41: the correction's excess over Marlin + rmw, in percentage points of Marlin
#: alone: graph median and every shape (max), eager (cold) median.
RMW_TARGETS = {("graph", "median"): 3.0, ("graph", "max"): 8.0, ("cold", "median"): 5.0}


def swiglu_shapes() -> set[tuple[int, int, int, int]]:
    """(M, N, K, group_size) of every GEMM the ``swiglu`` matrix's pairs run."""
    return {(c.M, c.N, c.K, c.group_size) for c in MATRICES.cases("swiglu")}


def _shape(row: dict) -> tuple | None:
    try:
        return tuple(int(row[k]) for k in ("M", "N", "K", "group_size"))
    except (KeyError, TypeError, ValueError):
        return None


def rmw_excess_by_class(rows: list[dict], picks: dict[str, dict]) -> list[dict]:
    """Per (shape class, mode), then "all" per mode, then "swiglu" per mode (the shapes of
    the SwiGLU pairs' GEMMs, where the study has them): shapes, median and max excess over
    rmw (pp) and the worst shape, for ``picks`` (class -> {"variant": ...}); shapes
    without an rmw or empty row left out. [] for a study without rmw rows."""
    ex = [e for e in floor_excess(rows, picks) if e["excess_rmw_pp"] is not None]
    cls = {r["case_id"]: r["shape_class"] for r in rows}
    pairs = swiglu_shapes()
    pair_ids = {r["case_id"] for r in rows if _shape(r) in pairs}
    out = []
    for mode in dict.fromkeys(e["mode"] for e in ex):
        here = [e for e in ex if e["mode"] == mode]
        groups = {c: [e for e in here if cls[e["case_id"]] == c]
                  for c in dict.fromkeys(cls[e["case_id"]] for e in here)}
        swiglu = [("swiglu", sel)] if (sel := [e for e in here if e["case_id"] in pair_ids]) else []
        for name, sel in [*groups.items(), ("all", here), *swiglu]:
            worst = max(sel, key=lambda e: e["excess_rmw_pp"])
            out.append({"shape_class": name, "mode": mode, "shapes": len(sel),
                        "variants": sorted({e["variant"] for e in sel}),
                        "median_pp": statistics.median(e["excess_rmw_pp"] for e in sel),
                        "max_pp": worst["excess_rmw_pp"], "max_case": worst["case_id"]})
    return out


def rmw_target_checks(rows: list[dict], picks: dict[str, dict]) -> list[tuple[str, bool, str]]:
    """Issue 41's targets on ``picks``: (name, met, the figure) for each target whose mode
    the study measured with rmw rows, over every shape, then over the SwiGLU pairs' GEMM
    shapes where the study has them (the same bounds, named "swiglu pairs'")."""
    table = rmw_excess_by_class(rows, picks)
    checks = []
    for which, label in (("all", ""), ("swiglu", "swiglu pairs' ")):
        whole = {t["mode"]: t for t in table if t["shape_class"] == which}
        for (mode, stat), limit in RMW_TARGETS.items():
            t = whole.get(mode)
            if t is None:
                continue
            got = t[f"{stat}_pp"]
            where = f" at {t['max_case']}" if stat == "max" else ""
            checks.append((f"{label}excess over rmw, {mode} {stat} <= {limit:g} pp",
                           got <= limit, f"{got:.1f} pp{where} over {t['shapes']} shapes"))
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
