"""docs/hopper.md §5.11's figures: where the default's excess over rmw lies, by half.

The stored study of call z1 (``harness study correction --variants addmm,gsplit,wide,
empty,rmw --budget-s 90`` on a fresh H100, 3ca0ca23, 890e885, 2026-12-07) read for the
shipped default (gsplit at decode, wide above): the excess over Marlin + rmw in
microseconds and in percentage points of Marlin alone, split into grouped and per-column
shapes above decode. The two variants of the thirty-seventh session aim at these halves:
``blocked`` at the grouped ones, ``fold`` at the per-column ones.
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
