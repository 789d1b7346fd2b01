"""The thirty-third session's device calls i1, j1, k1 and m1, four fresh H100s at f380eb5
(docs/measurement.md §16.24), read back on a CPU from docs/data/h100-2026-12-07-i.tar.gz:
i1 ran the foreign job fresh, again warm, then the same-model job warm (``noxlast``); j1,
k1 and m1 each ran the same-model job alone, fresh. The foreign jobs ran with the machine
factor's benches at 5 samples a row (`--set projection_min_samples=5`, the default since
6b75ec5, f380eb5 predates it). Each call asked for an H200 and got an H100. The figures
the docs quote are these files'; test_real_h100_replay.py replays the six jobs' verdicts
with `harness report`."""

from __future__ import annotations

import statistics

import device_archives as da
import pytest

runs = da.archive_fixture("h100-2026-12-07-i.tar.gz", "h100-2026-12-07-i")
runs_d = da.archive_fixture("h100-2026-12-07-d.tar.gz", "h100-2026-12-07-d")
runs_f = da.archive_fixture("h100-2026-12-07-f.tar.gz", "h100-2026-12-07-f")
runs_g = da.archive_fixture("h100-2026-12-07-g.tar.gz", "h100-2026-12-07-g")
HEAD = "f380eb5c78ca"
UUIDS = {"i1": "559f9cba-d7b4-1060-57f6-a52b500e540d",
         "j1": "42d6804c-caf4-7c54-8b1d-626efffa9d5f",
         "k1": "54c822e7-6cc5-d0e4-3008-c708aba6dfb5",
         "m1": "5d517126-43f8-615d-60e0-50560ef53fef"}
FOREIGN, FOREIGN2 = f"i1/foreign/{HEAD}/sm90", f"i1/foreign2/{HEAD}/sm90"
SAME_WARM = f"i1/aa3/{HEAD}/sm90"
SAME_FRESH = {m: f"{m}/aa/{HEAD}/sm90" for m in ("j1", "k1", "m1")}
#: run folder -> (machine, exit code, job seconds)
JOBS = {FOREIGN: ("i1", 0, 160), FOREIGN2: ("i1", 0, 141), SAME_WARM: ("i1", 0, 89),
        SAME_FRESH["j1"]: ("j1", 0, 128), SAME_FRESH["k1"]: ("k1", 0, 108),
        SAME_FRESH["m1"]: ("m1", 0, 107)}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_exit_and_time(runs, folder):
    machine, code, seconds = JOBS[folder]
    da.check_job(runs, folder, UUIDS[machine], (code, seconds))


@pytest.mark.parametrize("folder", [FOREIGN, FOREIGN2])
def test_the_foreign_jobs_pass_with_every_gated_row_judged(runs, folder):
    """The eighth fresh H100 at f380eb5 (and the same machine warm): no gated row
    TIMING_NOT_COMPARABLE, no false alarm, gsplit's five production rows read FASTER by the
    A/B, 23 rows sent to the A/B each time, the factor at 5 samples."""
    da.check_factor_job(runs, folder, JOBS, UUIDS)
    faster = {k.split("|")[0] for k in da.check_every_gated_row_judged(runs, folder)}
    assert faster == da.GSPLIT_FASTER
    assert da.failing(runs, folder) == {} and len(da.ab_sent(runs, folder)) == 23


@pytest.mark.parametrize("folder, sent", [(SAME_WARM, 2), (SAME_FRESH["j1"], 9),
                                          (SAME_FRESH["k1"], 4), (SAME_FRESH["m1"], 3)])
def test_the_same_model_jobs_pass_and_what_their_ab_measured(runs, folder, sent):
    """Against the H100's own baseline (5d57ec3): every gated row SAME or FASTER, and each
    job's screen sent a few rows to its A/B (2, 9, 4 and 3), all read SAME: a same-model job
    with nothing to A/B, as f1's, is not the usual case on these machines."""
    assert da.failing(runs, folder) == {}
    measured = {k: v["verdict"] for k, v in da.ab_measured(runs, folder).items()}
    assert len(measured) == sent and set(measured.values()) == {"SAME"}


def test_where_the_jobs_time_went(runs):
    """i1's foreign job fresh and warm: the factor 20.6 s and 19.8 s, the A/B 57.8 s and
    53.2 s; the same-model jobs' A/B 17.5 s (warm, i1), 33.0 s, 18.8 s and 11.6 s (fresh,
    j1, k1 and m1)."""
    secs = {f: runs(f, "job.json")["seconds"] for f in JOBS}
    assert [round(secs[f]["machine factor"], 1) for f in (FOREIGN, FOREIGN2)] == [20.6, 19.8]
    assert [round(secs[f]["A/B"], 1) for f in (FOREIGN, FOREIGN2, SAME_WARM, SAME_FRESH["j1"],
                                                SAME_FRESH["k1"], SAME_FRESH["m1"])] \
        == [57.8, 53.2, 17.5, 33.0, 18.8, 11.6]


def test_the_warm_ratio_on_one_machine(runs):
    """On i1, warm: the foreign job 141 s against the same-model job's 89 s (which A/B'd 2
    rows): 1.59x, over the 1.5x line."""
    total = {f: runs(f, "job.json")["seconds"]["total"] for f in (FOREIGN2, SAME_WARM)}
    assert round(total[FOREIGN2] / total[SAME_WARM], 2) == 1.59


def test_fresh_jobs_pooled_over_machines(runs, runs_d, runs_f, runs_g):
    """Every fresh job at f380eb5 with the factor at 5: five foreign jobs (d1, e1, g1, h1,
    i1: 128-184 s, median 159.7 s) and four same-model jobs (f1, j1, k1, m1: 76-128 s,
    median 107.3 s). The medians' ratio is 1.49x; against f1 alone (nothing to A/B) 2.10x. The
    same-model job's own A/B (0-33 s) moves the ratio as much as anything the foreign job
    does."""
    foreign = [r(f"{m}/foreign/{HEAD}/sm90", "job.json")["seconds"]["total"]
               for r, m in ((runs_d, "d1"), (runs_d, "e1"), (runs_g, "g1"), (runs_g, "h1"),
                            (runs, "i1"))]
    same = [r(f"{m}/aa/{HEAD}/sm90", "job.json")["seconds"]["total"]
            for r, m in ((runs_f, "f1"), (runs, "j1"), (runs, "k1"), (runs, "m1"))]
    assert [round(t) for t in foreign] == [184, 128, 158, 165, 160]
    assert [round(t) for t in same] == [76, 128, 108, 107]
    fm, sm = statistics.median(foreign), statistics.median(same)
    assert (round(fm, 1), round(sm, 1), round(fm / sm, 2)) == (159.7, 107.3, 1.49)
    assert round(fm / min(same), 2) == 2.10


@pytest.mark.parametrize("folder, benches, rows", [(FOREIGN, 21, 218), (FOREIGN2, 21, 192),
                                                   (SAME_WARM, 14, 20),
                                                   (SAME_FRESH["j1"], 14, 86),
                                                   (SAME_FRESH["k1"], 14, 40),
                                                   (SAME_FRESH["m1"], 6, 18)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    da.check_ab_benches_own_rows(runs, folder, benches, rows)


@pytest.mark.parametrize("folder, span", [(FOREIGN, 24.5), (FOREIGN2, 19.4), (SAME_WARM, 9.2),
                                          (SAME_FRESH["j1"], 15.7), (SAME_FRESH["k1"], 9.0)])
def test_what_the_extra_rounds_took(runs, folder, span):
    """From the end of the A/B's third round to the end of its seventh (the extra rounds
    of the rows left undecided), by the benches' own time records: 19-25 s of the foreign
    jobs' A/B, 9-16 s of the same-model jobs'."""
    times = da.ab_bench_times(runs, folder).values()
    third = max(t["ended"] for t in times if t["round"] <= 2)
    assert max(t["round"] for t in times) == 6
    assert round(max(t["ended"] for t in times) - third, 1) == span
