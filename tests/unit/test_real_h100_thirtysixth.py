"""The thirty-sixth session's one device call, n1: a fresh H100 at f380eb5 that ran the
same-model job alone (docs/measurement.md §16.25), read back on a CPU from
docs/data/h100-2026-12-08-n.tar.gz. The call asked for an H200 and got an H100, after ten
refused starts. test_real_h100_replay.py replays the job's verdicts with `harness report`."""

from __future__ import annotations

import statistics

import device_archives as da

runs = da.archive_fixture("h100-2026-12-08-n.tar.gz", "h100-2026-12-08-n")
runs_i = da.archive_fixture("h100-2026-12-07-i.tar.gz", "h100-2026-12-07-i")
runs_d = da.archive_fixture("h100-2026-12-07-d.tar.gz", "h100-2026-12-07-d")
runs_f = da.archive_fixture("h100-2026-12-07-f.tar.gz", "h100-2026-12-07-f")
runs_g = da.archive_fixture("h100-2026-12-07-g.tar.gz", "h100-2026-12-07-g")
HEAD = "f380eb5c78ca"
UUID = "f6f0c305-7a48-0b99-343e-7c18f382bf8e"
SAME = f"n1/aa/{HEAD}/sm90"


def test_the_job_its_card_exit_and_time(runs):
    da.check_job(runs, SAME, UUID, (0, 100))


def test_the_same_model_job_passes_and_what_its_ab_measured(runs):
    """Against the H100's own baseline (5d57ec3): no failing row, the four gsplit production
    rows and one SwiGLU row FASTER, the rest SAME; the screen sent three production rows to
    the A/B, all SAME (two of them after the extra rounds)."""
    assert da.failing(runs, SAME) == {}
    verdicts = {s["matrix"]: s["verdicts"] for s in runs(SAME, "job.json")["steps"]}
    assert verdicts == {"production": {"SAME": 276, "FASTER": 4},
                        "swiglu": {"SAME": 83, "FASTER": 1}, "ppl": {"SAME": 16}}
    measured = {k: v["verdict"] for k, v in da.ab_measured(runs, SAME).items()}
    assert len(measured) == 3 and set(measured.values()) == {"SAME"}


def test_where_the_jobs_time_went(runs):
    """The bench 69.0 s (graph 45.8 of it), the A/B 18.8 s, the whole job 100.4 s."""
    got = runs(SAME, "job.json")
    assert (got["seconds"]["bench (production+swiglu)"], got["bench_stages_s"]["graph"],
            got["seconds"]["A/B"], got["seconds"]["total"]) == (69.0, 45.8, 18.8, 100.4)


def test_every_ab_bench_timed_only_its_own_rows(runs):
    da.check_ab_benches_own_rows(runs, SAME, 14, 34)


def test_fresh_jobs_pooled_over_machines(runs, runs_i, runs_d, runs_f, runs_g):
    """The fifth fresh same-model job at f380eb5 (100 s) joins f1, j1, k1 and m1: five at
    76-128 s, median 106.7 s (m1's), against the five fresh foreign jobs' median of 159.7 s:
    1.497x (1.49x with four), under issue 36's 1.5x line by a hair on fresh medians, and
    2.10x against f1's idle same-model job."""
    foreign = [r(f"{m}/foreign/{HEAD}/sm90", "job.json")["seconds"]["total"]
               for r, m in ((runs_d, "d1"), (runs_d, "e1"), (runs_g, "g1"), (runs_g, "h1"),
                            (runs_i, "i1"))]
    same = [r(f"{m}/aa/{HEAD}/sm90", "job.json")["seconds"]["total"]
            for r, m in ((runs_f, "f1"), (runs_i, "j1"), (runs_i, "k1"), (runs_i, "m1"),
                         (runs, "n1"))]
    assert [round(t) for t in same] == [76, 128, 108, 107, 100]
    fm, sm = statistics.median(foreign), statistics.median(same)
    assert (round(fm, 1), round(sm, 1), round(fm / sm, 3)) == (159.7, 106.7, 1.497)
    assert round(fm / min(same), 2) == 2.10
