"""The twenty-sixth session's device call a1, a fresh H100 at f380eb5 (the held extra-round
benches of 4fb1029 on a GPU), read back on a CPU from docs/data/h100-2026-12-07-a.tar.gz
(docs/measurement.md §16.19): the foreign job fresh, again with the baseline commits'
builds cached, then the same-model job warm. The figures the docs quote are these files';
test_real_h100_replay.py replays the three jobs' verdicts with `harness report`."""

from __future__ import annotations

import sys

import device_archives as da
import pytest

sys.path.insert(0, str(da.ROOT / "scripts"))
import screen_noise  # noqa: E402

runs = da.archive_fixture("h100-2026-12-07-a.tar.gz", "h100-2026-12-07-a")
runs_x = da.archive_fixture("h100-2026-12-06-x.tar.gz", "h100-2026-12-06-x")
runs_y = da.archive_fixture("h100-2026-12-07-y.tar.gz", "h100-2026-12-07-y")
HEAD = "f380eb5c78ca"
UUID = "1b2a37f3-58e6-c371-fa37-7b012ec96d8c"
FOREIGN, FOREIGN2, SAME = (f"a1/{j}/{HEAD}/sm90" for j in ("foreign", "foreign2", "aa3"))
#: run folder -> (exit code, job seconds)
JOBS = {FOREIGN: (0, 174), FOREIGN2: (0, 149), SAME: (0, 100)}


def startup_waits(runs, folder: str) -> dict[str, float]:
    """Each A/B bench's wait for its own start-up, in seconds (ready after its release),
    by its time file's path under ``ab/``; the waits of at least 0.05 s."""
    waits = {path: t["ready"] - t["released"]
             for path, t in da.ab_bench_times(runs, folder).items()}
    return {path: round(w, 1) for path, w in waits.items() if w >= 0.05}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    da.check_job(runs, folder, UUID, JOBS[folder])


@pytest.mark.parametrize("folder", [FOREIGN, FOREIGN2])
def test_the_unchanged_commit_gives_every_gated_row_a_speed_verdict(runs, folder):
    """No gated row TIMING_NOT_COMPARABLE, no false alarm; FASTER only at gsplit's rows
    (foreign2 left M256-N2048-K8192-g128 to the projection: -1.95%, under the 2% screen)."""
    faster = {k.split("|")[0] for k in da.check_every_gated_row_judged(runs, folder)}
    assert faster == (da.GSPLIT_FASTER if folder == FOREIGN
                      else da.GSPLIT_FASTER - {"M256-N2048-K8192-g128-s0"})


def test_the_direction_rule_held_one_row_against_a_contradicting_ab(runs):
    """foreign2: fp16_cache M64-N2048-K8192-gK read +2.95% after 7 rounds (threshold
    2.20%) in a direction it was not sent for: it stands SAME (contradicted)."""
    rows = runs(FOREIGN2, "production.json")["ab_confirm"]["rows"]
    got = {k: v for k, v in rows.items() if v.get("source") == "contradicted"}
    assert list(got) == ["M64-N2048-K8192-gK-s0|fp16_cache|graph"]
    row = got["M64-N2048-K8192-gK-s0|fp16_cache|graph"]
    assert (row["verdict"], row["rounds"], round(row["change"], 4)) == ("SAME", 7, 0.0295)


def test_the_same_model_job_fails_nothing_its_one_error_a_peer_row(runs):
    """The one ERROR of the three jobs: marlin_fused_zero (a peer, not gating) at
    M1024-N2048-K8192-g128, its re-check on fresh inputs 4.8x the first inputs' error:
    Marlin's known split-K race at M = 1024."""
    verdicts = runs(SAME, "production.json")["gate"]["verdicts"]
    errors = [k for k, v in verdicts.items() if v == "ERROR"]
    assert errors == ["M1024-N2048-K8192-g128-s0|marlin_fused_zero|graph"]
    assert da.failing(runs, SAME) == {}


@pytest.mark.parametrize("folder, benches, rows", [(FOREIGN, 21, 214), (FOREIGN2, 21, 130),
                                                   (SAME, 14, 52)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    da.check_ab_benches_own_rows(runs, folder, benches, rows)


def test_the_held_extra_round_benches_barely_waited(runs):
    """Eight (foreign), five (foreign2) and two (same-model) rows got four extra rounds;
    their first benches, started while round 2 measured, waited 2.2 s, nothing and
    0.8 s (y1 at 890e885: round 3's first bench 4.4 s)."""
    assert startup_waits(runs, FOREIGN) == {
        "production+swiglu/runs/round3/A@acffbe3b1f93.time.json": 2.2}
    assert startup_waits(runs, FOREIGN2) == {}
    assert startup_waits(runs, SAME) == {"production/runs/round3/A.time.json": 0.8,
                                         "production/runs/round4/B.time.json": 1.2}
    assert [round(runs(f, "job.json")["seconds"]["A/B: start-up wait"], 1)
            for f in (FOREIGN, FOREIGN2, SAME)] == [2.2, 0.0, 2.1]


def test_the_warm_foreign_job_against_the_same_model_job(runs):
    """149 s against 100 s on the same machine, both warm: 1.49x. The foreign job's extra
    is the machine factor (25 s) and its A/B (48 s for 15 rows against 26 s for 6)."""
    secs = {f: runs(f, "job.json")["seconds"] for f in (FOREIGN2, SAME)}
    assert round(secs[FOREIGN2]["total"] / secs[SAME]["total"], 2) == 1.49
    assert [round(secs[FOREIGN2][k]) for k in ("machine factor", "A/B")] == [25, 48]
    assert round(secs[SAME]["A/B"]) == 26
    assert (len(da.ab_measured(runs, FOREIGN2)), len(da.ab_measured(runs, FOREIGN))) == (15, 25)


def test_the_screens_noise_is_per_process_and_a_wider_screen_loses_real_changes(
        runs, runs_x, runs_y, capsys):
    """scripts/screen_noise.py over the five unchanged foreign jobs and the two regressions
    of a1, x1 and y1: the 86 SAME rows the screen sent were off by about 1% on either
    side (the bench's B against the rounds' B, the factor's A against the rounds' A), and
    a flat screen at 2.5% would still send 40 of them while losing 6 of the 176 real
    changes (gsplit's gains, the regression's fp16_cache rows)."""
    folders = [runs.top / FOREIGN, runs.top / FOREIGN2,
               runs_x.top / "x1/foreign/890e885d3286/sm90",
               runs_x.top / "x1/foreign2/890e885d3286/sm90",
               runs_x.top / "x1/regressforeign/0afcb3933adf/sm90",
               runs_y.top / "y1/foreign/890e885d3286/sm90",
               runs_y.top / "y1/regressforeign/f9c4e1c79d8e/sm90"]
    assert screen_noise.main([str(f) for f in folders]) == 0
    out = capsys.readouterr().out
    assert "262 rows A/B'd in 7 runs: 86 SAME, 176 FASTER or SLOWER" in out
    assert ("SAME rows: median |bench B off| 0.0106, median |factor A off| 0.0108; "
            "the bench the farther off in 50%") in out
    assert "a flat screen at 2.5%: sends 210 of them (40 SAME), loses 6 of the 176 real" in out
    assert "a flat screen at 3.0%: sends 185 of them (18 SAME), loses 9 of the 176 real" in out
