"""The twenty-fourth session's device call x1, a fresh H100 at 890e885 (the fused-row fix of
4a92d54 on a GPU for the first time), read back on a CPU from
docs/data/h100-2026-12-06-x.tar.gz (docs/measurement.md §16.17): the foreign job fresh,
again with the baseline commits' builds cached, the same-model job warm, then the real
regression judged as foreign. The figures the docs quote are these files';
test_real_h100_replay.py replays every job's verdicts with `harness report`."""

from __future__ import annotations

import glob
from pathlib import Path

import pandas as pd
import pytest
from device_archives import (
    GSPLIT_FASTER,
    ab_measured,
    archive_fixture,
    check_ab_benches_own_rows,
    check_every_gated_row_judged,
    check_job,
    failing,
    summary,
)

runs = archive_fixture("h100-2026-12-06-x.tar.gz", "h100-2026-12-06-x")
HEAD = "890e885d3286"
UUID = "5d41dc10-a9f3-454f-c985-3167b942f5b1"
REGRESS = "x1/regressforeign/0afcb3933adf/sm90"
FOREIGN = [f"x1/foreign/{HEAD}/sm90", f"x1/foreign2/{HEAD}/sm90"]
#: run folder -> (exit code, job seconds)
JOBS = {FOREIGN[0]: (0, 117), FOREIGN[1]: (0, 117), f"x1/aa3/{HEAD}/sm90": (0, 69),
        REGRESS: (1, 148)}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    check_job(runs, folder, UUID, JOBS[folder])


@pytest.mark.parametrize("folder", FOREIGN)
def test_the_unchanged_commit_gives_every_gated_row_a_speed_verdict(runs, folder):
    """No gated row TIMING_NOT_COMPARABLE, no false alarm; FASTER only at gsplit's rows (the
    five of u1-u3) and the SwiGLU pair at M16."""
    assert check_every_gated_row_judged(runs, folder) == {
        f"{cid}|marlin_asym|graph" for cid in GSPLIT_FASTER}
    swiglu = runs(folder, "swiglu.json")["ab_confirm"]["rows"]
    assert {k for k, v in swiglu.items() if v["verdict"] == "FASTER"} == {
        "swiglu_pair-M16-N8192-K2048-g128-s0|marlin_asym|graph"}


def test_the_regression_fails_fp16_cache_and_nothing_else(runs):
    """fp16_cache's 70 gated rows SLOWER, on 79 rows measured A/B in 62 s."""
    assert failing(runs, REGRESS) == {("production", "fp16_cache"): 56,
                                      ("swiglu", "fp16_cache"): 14}
    assert len(ab_measured(runs, REGRESS)) == 79
    assert round(runs(REGRESS, "job.json")["seconds"]["A/B"]) == 62


@pytest.mark.parametrize("folder, benches, rows", [
    (FOREIGN[0], 9, 72), (FOREIGN[1], 17, 86), (REGRESS, 9, 474), (f"x1/aa3/{HEAD}/sm90", 6, 6)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    """The fix of 4a92d54 on a GPU: no A/B bench timed a row its row file did not ask for
    (w1 at 1768dae: 126 of 180), and no fused pair row without native_int4's."""
    check_ab_benches_own_rows(runs, folder, benches, rows)
    for bench in glob.glob(str(runs.top / folder / "ab/*/runs/round*/*/*/sm90")):
        swiglu = Path(bench, "swiglu.csv")
        if swiglu.exists():
            fused = pd.read_csv(swiglu)
            assert not ((fused.path == "native_int4_fused") & (fused.status == "ok")).any()


def test_the_foreign_job_against_the_same_model_job_warm(runs):
    """117 s against 69 s: 1.69x (w1 at 1768dae: 2.14x). The rest is the machine factor's
    22 s and an A/B of 31 s against 5 s, of which 13 rows in three rounds and one row's
    four extra rounds (M128 fp16_cache gK at -1.46%). The fresh foreign job's A/B took
    21 s for 12 rows."""
    same = runs(f"x1/aa3/{HEAD}/sm90", "job.json")["seconds"]
    warm = runs(FOREIGN[1], "job.json")["seconds"]
    assert round(warm["total"] / same["total"], 2) == 1.69
    assert [round(warm[k]) for k in ("machine factor", "A/B")] == [22, 31]
    assert round(same["A/B"]) == 5
    assert len(ab_measured(runs, FOREIGN[1])) == 13
    assert ("extra rounds: M128-N2048-K2048-gK-s0|fp16_cache|graph SAME -1.46% "
            "(threshold 2.25%, 7 rounds)") in summary(runs, FOREIGN[1])
    fresh = runs(FOREIGN[0], "job.json")["seconds"]
    assert round(fresh["A/B"]) == 21 and len(ab_measured(runs, FOREIGN[0])) == 12
