"""docs/hopper.md §5.8's figures come from the stored studies of gsplit's first build.

Two processes of ``harness study correction --variants stream,wide,gsplit,empty,rmw`` on
one fresh H100 (f9520f66, 96dfbc2, 2026-12-06). The excess over Marlin + rmw is computed
here as the document states it: (variant - rmw) / Marlin alone x 100, graph mode; the
default is stream at decode and wide above (``AUTO_BY_CLASS`` of that commit).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"
STUDIES = ("s1", "s3")
PICK = {"decode": "stream", "mid": "wide", "large": "wide"}

#: shape -> (default s1, default s3, gsplit s1, gsplit s3), as in the §5.8 table
TABLE = {
    "M16-N2048-K8192-g128-s0": (37.7, 37.5, 18.4, 18.0),
    "M16-N2048-K2048-g128-s0": (18.2, 18.1, 12.2, 12.3),
    "M16-N8192-K2048-g128-s0": (29.2, 29.1, 24.5, 24.9),
    "M32-N2048-K8192-g128-s0": (25.3, 25.0, 19.9, 19.5),
    "M64-N2048-K8192-g128-s0": (19.0, 19.0, 14.7, 14.5),
    "M1-N6144-K2048-g128-s0": (12.5, 12.5, 21.0, 21.2),
    "M128-N8192-K2048-g128-s0": (26.0, 25.1, 44.3, 43.5),
    "M256-N8192-K2048-g128-s0": (12.9, 13.1, 52.7, 53.2),
}


def _excess(file: str, mode: str = "graph") -> pd.DataFrame:
    """(variant - rmw) / Marlin alone x 100 per (class, shape) for stream, wide and gsplit,
    with ``default`` (``PICK``) and ``new`` (gsplit at decode, wide above)."""
    d = pd.read_csv(DATA / file)
    d = d[d["mode"] == mode]
    t = d.pivot_table(index=["shape_class", "case_id"], columns="variant", values="time_us")
    marlin = d.groupby("case_id").marlin_us.first().reindex(t.index.get_level_values(1)).values
    x = pd.DataFrame({v: (t[v] - t["rmw"]) / marlin * 100 for v in ("stream", "wide", "gsplit")},
                     index=t.index)
    x["default"] = [x.loc[i, PICK[i[0]]] for i in x.index]
    x["new"] = [x.loc[i, "gsplit" if i[0] == "decode" else "wide"] for i in x.index]
    return x


@pytest.fixture(scope="module")
def excess():
    return {tag: _excess(f"study-correction-h100-96dfbc2-gsplit-{tag}.csv.gz").droplevel(0)
            for tag in STUDIES}


def test_the_studies_cover_the_production_matrix_on_one_h100(excess):
    for tag in STUDIES:
        d = pd.read_csv(DATA / f"study-correction-h100-96dfbc2-gsplit-{tag}.csv.gz")
        assert d.case_id.nunique() == 56
        assert set(d.variant) >= {"marlin_only", "stream", "wide", "gsplit", "empty", "rmw"}
        assert excess[tag].notna().all().all()


@pytest.mark.parametrize("case_id", sorted(TABLE))
def test_the_per_shape_table(case_id, excess):
    d1, d3, g1, g3 = TABLE[case_id]
    got = (excess["s1"].loc[case_id, "default"], excess["s3"].loc[case_id, "default"],
           excess["s1"].loc[case_id, "gsplit"], excess["s3"].loc[case_id, "gsplit"])
    assert [round(float(v), 1) for v in got] == [d1, d3, g1, g3]


def test_the_per_column_rows_and_the_medians(excess):
    """G = 1 (gsplit does not run there): the default's excess 1.0-17.6 pp over both
    studies; the 56-shape graph median 11.7-12.2 pp whichever accumulation runs."""
    gk = pd.concat([excess[t].loc[[c for c in excess[t].index if "-gK-" in c], "default"]
                    for t in STUDIES])
    assert (round(float(gk.min()), 1), round(float(gk.max()), 1)) == (1.0, 17.6)
    medians = [round(float(excess[t][v].median()), 1) for t in STUDIES
               for v in ("default", "stream", "wide", "gsplit")]
    assert min(medians) == 11.7 and max(medians) == 12.7


# ------------------------------------------------------------ the shipped build (c311745)
S4 = "study-correction-h100-c311745-gsplit-s4.csv.gz"


def test_the_shipped_build_at_decode_and_the_new_default():
    """§5.8's second table and the lines under it (s4, graph): the M16 grouped shapes,
    decode's median and max, the 56-shape median and max of the default before and after;
    stream's own kernels at M = 1 and per-column (within 0.8 pp graph, 2.9 cold)."""
    x = _excess(S4)
    dec = x.xs("decode", level=0)
    got = {c: (round(float(dec.loc[c, "stream"]), 1), round(float(dec.loc[c, "gsplit"]), 1))
           for c in dec.index if c.startswith("M16-") and "-g128-" in c}
    assert got == {"M16-N2048-K8192-g128-s0": (37.7, 19.4), "M16-N2048-K2048-g128-s0": (18.5, 10.4),
                   "M16-N6144-K2048-g128-s0": (24.8, 18.3), "M16-N8192-K2048-g128-s0": (30.3, 24.3)}
    def r(*vs):
        return [round(float(v), 1) for v in vs]
    assert r(dec.stream.median(), dec.stream.max(), dec.gsplit.median(),
             dec.gsplit.max()) == [12.4, 37.7, 11.5, 24.3]
    assert r(x.default.median(), x.default.max(), x.new.median(),
             x.new.max()) == [11.8, 37.7, 11.7, 25.7]
    assert x.new.droplevel(0).idxmax() == "M128-N8192-K2048-g128-s0"
    same_route = [c for c in dec.index if c.startswith("M1-") or "-gK-" in c]
    assert (dec.loc[same_route, "gsplit"] - dec.loc[same_route, "stream"]).abs().max() <= 0.8
    cold = _excess(S4, "cold").xs("decode", level=0)
    assert (cold.loc[same_route, "gsplit"] - cold.loc[same_route, "stream"]).abs().max() <= 2.9
    assert [round(float(cold[v].median()), 1) for v in ("stream", "gsplit")] == [37.1, 32.7]
    mid = x.xs("mid", level=0)
    assert (round(float(mid.loc["M256-N2048-K8192-g128-s0", "gsplit"]), 1),
            round(float(mid.loc["M256-N2048-K8192-g128-s0", "wide"]), 1)) == (49.6, 25.0)
    assert (round(float(mid.loc["M32-N8192-K2048-g128-s0", "gsplit"]), 1),
            round(float(mid.loc["M32-N8192-K2048-g128-s0", "wide"]), 1)) == (33.2, 22.8)
