"""docs/hopper.md §5.10's figures come from the stored study of the addmm probe.

One process of ``harness study correction --variants addmm,gsplit,wide,empty,rmw
--budget-s 90`` on a fresh H100 (3ca0ca23, 890e885, 2026-12-07, call z1). The excess over
Marlin + rmw is (variant - rmw) / Marlin alone x 100, as §5.8 defines it. The same study
also gives §5.11's figures: where the shipped default (gsplit at decode, wide above) spends
its excess over rmw above decode, grouped against per-column (the halves the ``blocked``
and ``fold`` variants aim at).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

STUDY = (Path(__file__).resolve().parents[2] / "docs" / "data"
         / "study-correction-h100-890e885-addmm-z1.csv.gz")


@pytest.fixture(scope="module")
def study() -> pd.DataFrame:
    return pd.read_csv(STUDY)


def _excess(study: pd.DataFrame, mode: str) -> pd.DataFrame:
    d = study[study["mode"] == mode]
    t = d.pivot_table(index="case_id", columns="variant", values="time_us")
    marlin = d.groupby("case_id").marlin_us.first()
    x = pd.DataFrame({v: (t[v] - t["rmw"]) / marlin * 100 for v in ("addmm", "gsplit", "wide")})
    x["M"] = d.groupby("case_id").M.first()
    return x


def test_the_study_is_the_h100_run_of_890e885(study):
    assert set(study.variant) == {"addmm", "gsplit", "wide", "empty", "rmw", "marlin_only"}
    assert len(study) == 56 * 6 * 2 and study.time_us.notna().all()


@pytest.mark.parametrize("mode, medians, at_1024", [
    ("graph", (72.6, 11.7, 12.0), (24.1, 12.5, 12.0)),
    ("cold", (93.2, 25.4, 20.0), (31.6, 14.5, 14.5))])
def test_addmm_is_far_from_the_floor_at_every_m(study, mode, medians, at_1024):
    """The median excess over rmw (pp) of addmm, gsplit and wide over the 56 shapes and over
    the eight M = 1024 shapes: the tensor-core accumulation does not come near the floor."""
    x = _excess(study, mode)
    cols = ["addmm", "gsplit", "wide"]
    assert tuple(x[cols].median().round(1)) == medians
    assert tuple(x[x.M == 1024][cols].median().round(1)) == at_1024


@pytest.mark.parametrize("mode", ["graph", "cold"])
def test_addmm_is_slower_than_the_faster_of_gsplit_and_wide_at_every_shape(study, mode):
    d = study[study["mode"] == mode]
    t = d.pivot_table(index="case_id", columns="variant", values="time_us")
    assert len(t) == 56 and (t["addmm"] > t[["gsplit", "wide"]].min(axis=1)).all()
    big = [c for c in t.index if c.startswith("M1024")]
    lead = (t.loc[big, "addmm"] - t.loc[big, "gsplit"]) / study.groupby(
        "case_id").marlin_us.first().loc[big] * 100
    assert lead.min() > 2.0


def test_addmm_is_within_two_ulps_where_marlin_is_repeatable(study):
    """Every shape the study marks correct (all but Marlin's own non-repeatable M = 1024
    g128 shapes, which fail every variant alike): at most 1.42 ULP."""
    a = study[study.variant == "addmm"]
    assert a.correct.sum() == 106
    assert a[a.correct].max_corr_ulp.max() == pytest.approx(1.4164, abs=1e-4)
    bad = set(a[~a.correct].case_id)
    assert bad == set(study[(study.variant == "gsplit") & ~study.correct].case_id)
    assert all(c.startswith("M1024") and c.endswith("g128-s0") for c in bad)


def _default_excess(study: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Per shape: the default's time over rmw (us) and over rmw in pp of Marlin alone."""
    d = study[study["mode"] == mode]
    t = d.pivot_table(index=["M", "N", "K", "group_size"], columns="variant", values="time_us")
    marlin = d.groupby(["M", "N", "K", "group_size"]).marlin_us.first()
    default = t["gsplit"].where(t.index.get_level_values("M") <= 16, t["wide"])
    x = pd.DataFrame({"us": default - t["rmw"], "pp": (default - t["rmw"]) / marlin * 100})
    x = x.reset_index()
    x["G"] = x.K // x.group_size
    return x


@pytest.mark.parametrize("mode, grouped, per_column", [
    ("graph", (20, 4.37, 19.11, 19.3, 30.7), (20, 1.97, 3.36, 8.2, 14.2)),
    ("cold", (20, 6.93, 20.52, 27.3, 42.0), (20, 3.76, 6.99, 15.7, 26.3))])
def test_the_default_over_rmw_above_decode_by_half(study, mode, grouped, per_column):
    """M >= 32: shapes, median and max excess in us, median and max in pp."""
    x = _default_excess(study, mode)
    for want, sel in ((grouped, x.G > 1), (per_column, x.G == 1)):
        s = x[sel & (x.M >= 32)]
        got = (len(s), round(float(s.us.median()), 2), round(float(s.us.max()), 2),
               round(float(s.pp.median()), 1), round(float(s.pp.max()), 1))
        assert got == want


def test_the_grouped_k8192_shapes_cost_microseconds_at_every_m(study):
    """64 groups (K = 8192, g128, N = 2048): 7.2-7.3 us over rmw at M = 32-128, 10.0 at 256,
    19.1 at 1024 (graph): the accumulation with its group sums, a rank-64 update of a few
    hundred cycles of arithmetic."""
    x = _default_excess(study, "graph")
    s = x[(x.G == 64)].set_index("M").us.round(1)
    assert s.loc[[32, 64, 128, 256, 1024]].tolist() == [7.3, 7.3, 7.2, 10.0, 19.1]
