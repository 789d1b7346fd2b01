"""The twenty-fifth session's device call y1, a second fresh H100 at 890e885 (x1 of the
twenty-fourth was the first), read back on a CPU from docs/data/h100-2026-12-07-y.tar.gz
(docs/measurement.md §16.18): the foreign job fresh, then the real regression judged as
foreign, then the addmm probe's GPU accuracy test. With x1 it makes issue 36's two calls
on two fresh H100s at one commit. The figures the docs quote are these files';
test_real_h100_replay.py replays both jobs' verdicts with `harness report`."""

from __future__ import annotations

import re

import device_archives as da
import pytest

runs = da.archive_fixture("h100-2026-12-07-y.tar.gz", "h100-2026-12-07-y")
HEAD = "890e885d3286"
UUID = "163aa591-b34a-24f8-9e66-f7311fb4be3f"
FOREIGN = f"y1/foreign/{HEAD}/sm90"
REGRESS = "y1/regressforeign/f9c4e1c79d8e/sm90"
#: run folder -> (exit code, job seconds)
JOBS = {FOREIGN: (0, 166), REGRESS: (1, 210)}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    da.check_job(runs, folder, UUID, JOBS[folder])


def test_the_unchanged_commit_gives_every_gated_row_a_speed_verdict(runs):
    """No gated row TIMING_NOT_COMPARABLE, no false alarm; FASTER only at gsplit's five
    production rows (x1 also read the SwiGLU pair at M16 FASTER; y1 reads it SAME)."""
    assert da.check_every_gated_row_judged(runs, FOREIGN) == {
        f"{cid}|marlin_asym|graph" for cid in da.GSPLIT_FASTER}
    swiglu = runs(FOREIGN, "swiglu.json")["ab_confirm"]["rows"]
    assert {v["verdict"] for v in swiglu.values()} == {"SAME"}


def test_the_regression_fails_fp16_cache_and_nothing_else(runs):
    """fp16_cache's 70 gated rows SLOWER, as on x1, u1 and u2."""
    assert da.failing(runs, REGRESS) == {("production", "fp16_cache"): 56,
                                      ("swiglu", "fp16_cache"): 14}


@pytest.mark.parametrize("folder, benches, rows", [(FOREIGN, 21, 170), (REGRESS, 21, 626)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    da.check_ab_benches_own_rows(runs, folder, benches, rows)


def test_where_the_fresh_foreign_jobs_time_went(runs):
    """166 s: bench 72 (its build 8 and data 5 on a fresh machine), factor 25, A/B 56 s for
    23 rows, four of them given four extra rounds (x1's fresh job: 117 s, A/B 21 s for 12
    rows and no extra round)."""
    secs = runs(FOREIGN, "job.json")["seconds"]
    assert [round(secs[k]) for k in ("machine factor", "A/B")] == [25, 56]
    assert len(da.ab_measured(runs, FOREIGN)) == 23
    extra = re.findall(r"\|graph SAME [-+][0-9.]+% \(threshold 2\.00%, 7 rounds\)",
                       da.summary(runs, FOREIGN))
    assert len(extra) == 4


def test_the_addmm_probe_passes_its_gpu_accuracy_test(runs):
    """tests/gpu/test_correction_variants.py -k addmm: within 2 ULP of the exact
    correction and bitwise repeatable on all ten cases; five xfail the reference gate on
    Marlin's own documented error, as every variant does."""
    log = (runs.top / "y1" / "logs" / "y1-gputests.log").read_text()
    assert "5 passed, 574 deselected, 5 xfailed" in log
    assert "FAILED" not in log
