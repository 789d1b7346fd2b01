"""The twenty-ninth session's device call c1, a third fresh H100 at f380eb5 (a1's and b1's
commit, docs/measurement.md §16.22), read back on a CPU from
docs/data/h100-2026-12-07-c.tar.gz: the foreign job fresh, again warm at the factor's
10 samples a row (foreign2) and at 5 (foreign5), then the same-model job warm. The figures
the docs quote are these files'; test_real_h100_replay.py replays the four jobs' verdicts
with `harness report`."""

from __future__ import annotations

import sys

import device_archives as da
import pytest

sys.path.insert(0, str(da.ROOT / "scripts"))
import factor_samples  # noqa: E402

runs = da.archive_fixture("h100-2026-12-07-c.tar.gz", "h100-2026-12-07-c")
HEAD = "f380eb5c78ca"
UUID = "5c5f4ca4-db0e-a33a-a5fa-1d7ed9767511"
FOREIGN, FOREIGN2, FOREIGN5, SAME = (f"c1/{j}/{HEAD}/sm90"
                                     for j in ("foreign", "foreign2", "foreign5", "aa3"))
#: run folder -> (exit code, job seconds)
JOBS = {FOREIGN: (0, 172), FOREIGN2: (0, 148), FOREIGN5: (0, 142), SAME: (0, 76)}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    da.check_job(runs, folder, UUID, JOBS[folder])


@pytest.mark.parametrize("folder", [FOREIGN, FOREIGN2, FOREIGN5])
def test_the_unchanged_commit_gives_every_gated_row_a_speed_verdict(runs, folder):
    """The third fresh H100 at f380eb5: no gated row TIMING_NOT_COMPARABLE, no false
    alarm, and the production rows read FASTER are gsplit's, as on a1 and b1, at either
    factor minimum."""
    faster = {k.split("|")[0] for k in da.check_every_gated_row_judged(runs, folder)}
    assert faster == da.GSPLIT_FASTER
    assert da.failing(runs, folder) == {}


def test_the_factor_at_five_samples_timed_beside_ten_on_one_machine(runs):
    """foreign5 (`--set projection_min_samples=5`) against foreign2 (the default 10), both
    warm on c1: the factor 20.7 s against 25.1 s (measuring 19.2 against 23.6), the job
    142 s against 148 s, 1,273 factor samples against 2,291; the screen sent 23 rows
    against 21 and every verdict is the same."""
    ten, five = (runs(f, "job.json")["seconds"] for f in (FOREIGN2, FOREIGN5))
    assert (round(ten["machine factor"], 1), round(five["machine factor"], 1)) == (25.1, 20.7)
    assert (round(ten["machine factor: measuring"], 1),
            round(five["machine factor: measuring"], 1)) == (23.6, 19.2)
    assert (len(da.ab_sent(runs, FOREIGN2)), len(da.ab_sent(runs, FOREIGN5))) == (21, 23)
    for matrix in ("production", "swiglu"):
        verdicts = [{k: v["verdict"] for k, v in
                     runs(f, f"{matrix}.json")["ab_confirm"]["rows"].items()}
                    for f in (FOREIGN2, FOREIGN5)]
        assert verdicts[0] == verdicts[1]


def test_the_replay_at_five_predicted_the_measured_screen(runs, capsys):
    """scripts/factor_samples.py on foreign2 replays its stored screen at 10 and, at 5,
    sends 23 rows: as many as foreign5 sent when it measured at 5; foreign5 replays to its
    own stored screen of 23 at 5."""
    assert factor_samples.main([str(runs.top / FOREIGN2), "--min-samples", "5"]) == 0
    out = capsys.readouterr().out
    assert ("stored screen 21 rows, replay at 10: 21 (the same set; 0 rows' sample counts not "
            "reproduced); at 5: 23 (+2 -0, 0 real change(s) lost); factor samples "
            "2291 -> 1216") in out
    assert factor_samples.main([str(runs.top / FOREIGN5)]) == 0
    assert ("stored screen 23 rows, replay at 5: 23 (the same set; 0 rows' sample counts not "
            "reproduced)") in capsys.readouterr().out


def test_the_warm_ratio_against_an_idle_same_model_job(runs):
    """The same-model job here A/B'd one row (6 s): 76 s, the idle one. Against it the
    warm foreign job is 1.94x at 10 samples and 1.86x at 5; the foreign job's extra is
    the factor (21-25 s) and its A/B (52 s for 21-23 rows)."""
    same = runs(SAME, "job.json")["seconds"]
    assert round(same["A/B"]) == 6 and "machine factor" not in same
    ratios = [round(runs(f, "job.json")["seconds"]["total"] / same["total"], 2)
              for f in (FOREIGN2, FOREIGN5)]
    assert ratios == [1.94, 1.86]
    assert all(round(runs(f, "job.json")["seconds"]["A/B"]) == 52 for f in (FOREIGN2, FOREIGN5))


@pytest.mark.parametrize("folder, benches, rows", [(FOREIGN, 21, 196), (FOREIGN2, 21, 158),
                                                   (FOREIGN5, 21, 162), (SAME, 6, 6)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    da.check_ab_benches_own_rows(runs, folder, benches, rows)
