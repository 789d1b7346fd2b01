"""docs/hopper.md §5.9: a group sum taken from Marlin's own extra columns of ones.

The accuracy claim is recomputed on the CPU for one per-column and one grouped shape
(scripts/asum_fp16_precision.py's ``measure``); the H100 timing figures the section quotes
are read back from the committed probe (docs/data/marlin-extra-columns-h100-72689b5.csv,
scripts/marlin_extra_columns.py), and the H100 study of the variant built on it, ``ones``
(4854efc, call u1: docs/data/study-correction-h100-4854efc-ones-u1.csv.gz), whose sums
broke the accuracy bound on 26 of 28 per-column shapes: it was reverted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from harness.cases import MATRICES

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "marlin-extra-columns-h100-72689b5.csv"


def _script():
    spec = importlib.util.spec_from_file_location(
        "asum_fp16_precision", ROOT / "scripts" / "asum_fp16_precision.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case_id, fp16_within", [("M1-N2048-K2048-gK-s0", True),
                                                  ("M1-N2048-K2048-g128-s0", False)])
def test_fp16_sums_hold_the_bound_per_column_and_break_it_grouped(case_id, fp16_within):
    case = next(c for c in MATRICES.cases("production") if c.id == case_id)
    row = _script().measure(case)
    assert row["fp32_corr_ulp_max"] <= 0.51                  # today: half an ULP
    assert (row["fp16_corr_ulp_max"] <= 2.0) is fp16_within
    if not fp16_within:
        assert row["fp16_corr_ulp_max"] > 10                 # not a near miss


def _probe():
    return pd.read_csv(DATA)


def test_marlin_pays_little_for_128_extra_columns_at_decode():
    d = _probe()
    dec = d[(d.M <= 16) & (d.extra == 128)]
    got = {run: (round(p.extra_pct.median(), 1), round(p.extra_pct.max(), 1))
           for run, p in dec.groupby("run")}
    assert got == {"x1": (0.2, 2.9), "x3": (0.4, 3.3)}
    plus256 = d[(d.M <= 16) & (d.extra == 256)]             # what variant ones packed
    got = {run: (round(p.extra_pct.median(), 1), round(p.extra_pct.max(), 1))
           for run, p in plus256.groupby("run")}
    assert got == {"x1": (-0.7, 2.8), "x3": (-0.0, 3.9)}
    assert set(d.gpu_uuid) == {"GPU-e4ee0091-8128-d808-591f-5f4ed6c66352"}


def test_n2048_is_faster_padded_and_m1024_n2048_k2048_is_the_worst_case():
    d = _probe()
    n2048 = d[(d.N == 2048) & (d.K == 2048) & (d.M <= 64)]
    assert n2048.extra_pct.between(-20.1, -13.4).all() and len(n2048) == 10
    assert round(n2048.extra_pct.min(), 1) == -20.1 and round(n2048.extra_pct.max(), 1) == -13.4
    mid = d[d.M > 16]
    worst = mid.loc[mid.extra_pct.idxmax()]
    assert (worst.case_id, round(worst.extra_pct, 1)) == ("M1024-N2048-K2048-gK-s0", 41.6)
    assert round(mid.extra_pct.median(), 1) == 0.2 and len(mid) == 20


def test_what_the_design_would_give_against_the_rmw_floor():
    """§5.9's estimate: per per-column shape the cheaper of today's default (s4, graph:
    gsplit at decode, wide above) and Marlin's increase with the extra columns (x1, x2,
    the cheaper of +128 / +256), as excess over rmw in pp of Marlin."""
    s4 = pd.read_csv(ROOT / "docs" / "data" / "study-correction-h100-c311745-gsplit-s4.csv.gz")
    g = s4[s4["mode"] == "graph"].pivot_table(
        index=["case_id", "M", "K", "group_size"], columns="variant",
        values="time_us").reset_index()
    pct = {v: (g[v] / g["marlin_only"] - 1) * 100 for v in ("rmw", "wide", "gsplit")}
    today = pct["gsplit"].where(g["M"] <= 16, pct["wide"]) - pct["rmw"]
    probe = _probe()
    design = g["case_id"].map(probe[probe.run != "x3"].groupby("case_id").extra_pct.min())
    per_column = g["group_size"] == g["K"]
    new = today.where(~per_column, pd.concat([today, design], axis=1).min(axis=1))
    assert (round(today[per_column].median(), 1), round(new[per_column].median(), 1)) == (8.9, -0.2)
    assert (round(today.median(), 1), round(new.median(), 1)) == (11.7, 9.8)
    assert round(new.max(), 1) == round(today.max(), 1) == 25.6


def test_variant_ones_on_an_h100_fast_but_far_outside_the_accuracy_bound():
    """u1 (fresh H100 GPU-b66cf619, 4854efc; `harness study correction --variants
    ones,gsplit,wide,empty,rmw --filter group_size==K --budget-s 60`): in graph mode ones
    sat 3.8 pp over rmw at the per-column median against gsplit's 8.8 and wide's 9.2,
    but its correction was beyond 2 fp16 ULPs on 26 of 28 shapes (up to 2149 ULP), most likely
    because the row sums Marlin writes into its column N are rounded to fp16 wherever
    Marlin reduces k-slices through its fp16 output, not once as the CPU model above
    assumed; wide and
    gsplit stayed within 1.42 ULP on the same shapes. Reverted; the figures stay as the reason."""
    d = pd.read_csv(ROOT / "docs" / "data" / "study-correction-h100-4854efc-ones-u1.csv.gz")
    assert set(d.group_size == d.K) == {True} and d.case_id.nunique() == 28
    for mode in ("cold", "graph"):
        m = d[d["mode"] == mode]
        bad = m[~m.correct.astype(bool)]
        assert set(bad.variant) == {"ones"} and len(bad) == 26
        assert round(m[m.variant == "ones"].max_corr_ulp.max(), 1) == 2149.3
        assert m[m.variant.isin(["gsplit", "wide"])].max_corr_ulp.max() <= 1.42
    g = d[d["mode"] == "graph"].pivot_table(index="case_id", columns="variant",
                                            values="overhead_pct")
    excess = {v: round((g[v] - g["rmw"]).median(), 1) for v in ("ones", "gsplit", "wide")}
    assert excess == {"ones": 3.8, "gsplit": 8.8, "wide": 9.2}
