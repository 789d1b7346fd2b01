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


runs_w = archive_fixture("h100-2026-12-06-w.tar.gz", "h100-2026-12-06-w")


def _readings(job: Path) -> pd.DataFrame:
    """Each A/B round's reading of each row both sides timed: B's median over side A's
    (the part of A at the row's baseline commit), and the row's place among the rows each
    side's bench timed (fused pair rows left out: every bench of w1 timed them all)."""
    out = []
    for folder in sorted((job / "ab").glob("*/runs/round*")):
        seen: dict[str, dict] = {}
        for bench in folder.iterdir():
            tables = sorted(bench.glob("*/sm90/*.csv")) if bench.is_dir() else []
            if not tables:                      # a row file, a log, a shadow's folder
                continue
            rows = pd.concat([pd.read_csv(f) for f in tables])
            rows = rows[(rows["status"] == "ok") & (rows["path"] != "native_int4_fused")]
            seen[bench.name] = {(r.case_id, r.path): (i, r.time_us_median)
                                for i, r in enumerate(rows.itertuples())}
        for key, (at_b, t_b) in seen.pop("B").items():
            [(at_a, t_a)] = [side[key] for side in seen.values() if key in side]
            out.append({"case": key[0], "path": key[1], "change": t_b / t_a - 1,
                        "moved": at_b - at_a})
    return pd.DataFrame(out)


def test_where_a_row_sits_in_the_two_sides_benches(runs_u, runs_v, runs_w):
    """Side A runs one bench per baseline commit with that commit's rows only, side B one
    with all of them, so a row can sit later in B's bench than in A's. Over the seven
    foreign jobs of unchanged code stored (u1-u3, v2's and w1's two each; 193 readings of
    rows that are not gsplit's real gains), the mean B/A shows no trend with that shift
    (-0.12% in each band), but the spread grows with it within a path: marlin_asym's
    standard deviation is 0.61% where the row sits at the same place and 1.32% where it
    moved more than five places; fp16_cache's 1.08% and 1.77%; native_int4 reads faster
    in B the further it moved (-0.5% to -1.2%, 36 readings). Few readings a band, so
    not conclusive. The readings beyond 4%: w1's fp16_cache M64-N2048-K8192-gK (+4.2% to
    +5.8%, alone in its A bench, 6th in B's; docs/measurement.md §16.16), one of fp16_cache
    M128-N2048-K2048-g128 (+4.9%, moved 3) and one of native_int4 M16-N8192-K2048-gK
    (-4.1%, moved 5)."""
    jobs = [runs_u.top / f"u{i}/foreign/4854efc26822/sm90" for i in (1, 2, 3)]
    jobs += [runs_v.top / f"v2/{f}/1a6ecf6a5b9a/sm90" for f in ("foreign", "foreign2")]
    jobs += [runs_w.top / f"w1/{f}/1768dae60946/sm90" for f in ("foreign", "foreign2")]
    got = pd.concat([_readings(j) for j in jobs], ignore_index=True)
    noise = got[~((got["path"] == "marlin_asym") & got["case"].isin(GSPLIT))]
    assert len(noise) == 193
    band = pd.cut(noise["moved"], [-1, 0, 2, 5, 100])
    means = noise.groupby(band, observed=True)["change"].mean()
    assert len(means) == 4 and (means.abs() < 0.003).all(), means
    sd = noise.groupby(["path", band], observed=True)["change"].std()
    assert round(sd["marlin_asym"].iloc[0], 4) == 0.0061
    assert round(sd["marlin_asym"].iloc[-1], 4) == 0.0132
    assert round(sd["fp16_cache"].iloc[0], 4) == 0.0108
    assert round(sd["fp16_cache"].iloc[-1], 4) == 0.0177
    native = noise[noise["path"] == "native_int4"]
    assert len(native) == 36 and (native.groupby(band, observed=True)["change"].mean() < 0).all()
    outlier = noise[noise["change"].abs() > 0.04]
    assert sorted(zip(outlier["case"], outlier["path"], strict=True)) == [
        ("M128-N2048-K2048-g128-s0", "fp16_cache"), ("M16-N8192-K2048-gK-s0", "native_int4")
    ] + [("M64-N2048-K8192-gK-s0", "fp16_cache")] * 3
