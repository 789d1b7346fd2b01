"""Where the foreign job's A/B rows come from, read from the five foreign jobs of unchanged
code that the twenty-first and twenty-second sessions stored (u1-u3 at 4854efc, v2's two
at 1a6ecf6; docs/measurement.md §16.15). For every gated graph row, the screen compares
the job's own reading (HEAD) with the machine factor's (the baseline's commit, 10
samples) on the same H100. For a row sent to A/B, the A/B's rounds give three more
processes of each side. The figures say which reading was off. Issue 36's 1.5x line
depends on how many rows the screen sends."""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd
import pytest
from device_archives import archive_fixture

runs_u = archive_fixture("h100-2026-12-06-u.tar.gz", "h100-2026-12-06-u")
runs_v = archive_fixture("h100-2026-12-06-v.tar.gz", "h100-2026-12-06-v")
#: gsplit's real gains over the baseline's commit (marlin_asym), A/B'd FASTER in every job
GSPLIT = {"M16-N2048-K2048-g128-s0", "M16-N2048-K8192-g128-s0", "M16-N6144-K2048-g128-s0",
          "M16-N8192-K2048-g128-s0", "M256-N2048-K8192-g128-s0",
          "swiglu_pair-M16-N8192-K2048-g128-s0"}


def _graph(path: Path) -> pd.Series:
    d = pd.read_csv(path)
    d = d[(d["mode"] == "graph") & (d["status"] == "ok")]
    return d.set_index(["case_id", "path"])["time_us_median"]


def _rows(job: Path) -> pd.DataFrame:
    """One row per gated graph row: its screen change (the job's reading against the
    factor's), and each reading's offset from the median of its side's A/B rounds (NaN
    where the row was not A/B'd)."""
    out = []
    for matrix in ("production", "swiglu"):
        mine = _graph(job / f"{matrix}.csv")
        factor = pd.concat([_graph(f) for f in
                            (job / "ab" / "projection").glob(f"base-*/*/sm90/{matrix}.csv")])
        rounds: dict[tuple, list[float]] = {}
        for f in (job / "ab").glob(f"*/runs/round*/*/*/sm90/{matrix}.csv"):
            side = "A" if f.relative_to(job / "ab").parts[3].startswith("A") else "B"
            for key, t in _graph(f).items():
                rounds.setdefault((*key, side), []).append(t)
        for key in mine.index.intersection(factor.index):
            a, b = rounds.get((*key, "A")), rounds.get((*key, "B"))
            out.append({"case": key[0], "path": key[1],
                        "screen": mine[key] / factor[key] - 1,
                        "factor_off": factor[key] / statistics.median(a) - 1 if a else None,
                        "job_off": mine[key] / statistics.median(b) - 1 if b else None})
    return pd.DataFrame(out)


@pytest.fixture(scope="module")
def table(runs_u, runs_v):
    jobs = {f"u{i}": runs_u.top / f"u{i}/foreign/4854efc26822/sm90" for i in (1, 2, 3)}
    jobs.update({"v2": runs_v.top / "v2/foreign/1a6ecf6a5b9a/sm90",
                 "v2b": runs_v.top / "v2/foreign2/1a6ecf6a5b9a/sm90"})
    return pd.concat([_rows(d).assign(job=name) for name, d in jobs.items()],
                     ignore_index=True)


def test_the_rows_beyond_the_screen_are_the_rows_each_job_sent(table):
    """|change| > 2% gives the rows each job sent to A/B, but for one: u2's
    M256-N2048-K8192-gK marlin_asym at +2.09%, which the screen's Mann-Whitney test did not
    find significant. So the jobs sent 10, 18, 13, 16 and 22 rows."""
    beyond = table[table["screen"].abs() > 0.02]
    sent = beyond[beyond["job_off"].notna()]           # A/B'd: it has rounds
    assert sent.groupby("job").size().to_dict() == {"u1": 10, "u2": 18, "u3": 13,
                                                    "v2": 16, "v2b": 22}
    kept = beyond[beyond["job_off"].isna()]
    assert [(r.job, r.case, r.path, round(r.screen, 4)) for r in kept.itertuples()] == [
        ("u2", "M256-N2048-K8192-gK-s0", "marlin_asym", 0.0209)]


def test_the_noise_is_spread_over_paths_and_over_both_readings(table):
    """Of 79 rows sent over five jobs, 30 are gsplit's real gains. The other 49 are
    noise: marlin_asym 26, fp16_cache 12, native_int4 11. In 25 of the 49 the factor's
    reading is the one further from its side's A/B rounds; in the other 24 it is the
    job's own. Both are about 1.2% off at the median. The outliers are whole processes,
    on both sides, so more samples in the factor's bench would not remove them."""
    beyond = table[(table["screen"].abs() > 0.02) & table["job_off"].notna()]
    real = (beyond["path"] == "marlin_asym") & beyond["case"].isin(GSPLIT)
    assert len(beyond) == 79 and int(real.sum()) == 30
    noise = beyond[~real]
    assert noise.groupby("path").size().to_dict() == {"fp16_cache": 12, "marlin_asym": 26,
                                                      "native_int4": 11}
    assert int((noise["factor_off"].abs() > noise["job_off"].abs()).sum()) == 25
    med = noise[["factor_off", "job_off"]].abs().median()
    assert 0.010 < med["factor_off"] < 0.013 and 0.010 < med["job_off"] < 0.013


def test_marlin_asym_moves_most_between_processes(table):
    """The spread of the screen's change per path over all five jobs (350 rows each, 70
    of the fused native pair): marlin_asym's standard deviation is twice fp16_cache's,
    and its 95th percentile is 4.0% against 1.8%."""
    sd = table.groupby("path")["screen"].std()
    assert sd["marlin_asym"] > 2 * sd["fp16_cache"] > 2 * sd["native_int4_fused"]
    p95 = table.groupby("path")["screen"].apply(lambda s: s.abs().quantile(0.95))
    assert round(p95["marlin_asym"], 3) == 0.040 and round(p95["fp16_cache"], 3) == 0.018
