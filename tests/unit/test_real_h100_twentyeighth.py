"""The twenty-eighth session's device call b1, a second fresh H100 at f380eb5 (a1's commit,
docs/measurement.md §16.21), read back on a CPU from docs/data/h100-2026-12-07-b.tar.gz: the
foreign job fresh, again with the baseline commits' builds cached, then the same-model job
warm. The figures the docs quote are these files'; test_real_h100_replay.py replays the
three jobs' verdicts with `harness report`."""

from __future__ import annotations

import sys

import device_archives as da
import pytest

sys.path.insert(0, str(da.ROOT / "scripts"))
import factor_samples  # noqa: E402

runs = da.archive_fixture("h100-2026-12-07-b.tar.gz", "h100-2026-12-07-b")
runs_a = da.archive_fixture("h100-2026-12-07-a.tar.gz", "h100-2026-12-07-a")
HEAD = "f380eb5c78ca"
UUID = "f15b3631-d6e7-adfb-f55e-11317266e82c"
FOREIGN, FOREIGN2, SAME = (f"b1/{j}/{HEAD}/sm90" for j in ("foreign", "foreign2", "aa3"))
#: run folder -> (exit code, job seconds)
JOBS = {FOREIGN: (0, 158), FOREIGN2: (0, 146), SAME: (0, 136)}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    da.check_job(runs, folder, UUID, JOBS[folder])


@pytest.mark.parametrize("folder", [FOREIGN, FOREIGN2])
def test_the_unchanged_commit_gives_every_gated_row_a_speed_verdict(runs, folder):
    """The second fresh H100 at f380eb5: no gated row TIMING_NOT_COMPARABLE, no false
    alarm, and the production rows read FASTER are gsplit's, as on a1."""
    faster = {k.split("|")[0] for k in da.check_every_gated_row_judged(runs, folder)}
    assert faster == da.GSPLIT_FASTER
    assert da.failing(runs, folder) == {}


def test_the_same_model_job_sent_a_whole_path_to_its_ab(runs):
    """The same-model job (against the H100's own baseline, of 5d57ec3cbb60) found
    native_int4's SwiGLU rows +1.14% against the other paths, beyond the 1% whole-path
    screen: all 14 went to its A/B, which built 5d57ec3cbb60 on this machine and read
    every one SAME (|change| <= 0.61%)."""
    ab = runs(SAME, "swiglu.json")["ab_confirm"]
    assert ab["baseline_commit"].startswith("5d57ec3cbb60")
    rows = ab["rows"]
    assert len(rows) == 14 and {k.split("|")[1] for k in rows} == {"native_int4"}
    assert {v["verdict"] for v in rows.values()} == {"SAME"}
    assert max(abs(v["change"]) for v in rows.values()) < 0.0062
    assert da.failing(runs, SAME) == {}


def test_the_warm_foreign_job_against_the_same_model_job_on_two_h100s(runs, runs_a):
    """Warm, on one machine each: b1 146 s against 136 s (1.08x), a1 149 s against 100 s
    (1.49x). The foreign job's own time is steady (146-149 s, factor 24-25 s, A/B 48-56 s);
    the ratio moves with the same-model job's A/B (70 s here for a whole path, 26 s on a1)."""
    ratios = []
    for got, folders in ((runs, (FOREIGN2, SAME)),
                         (runs_a, tuple(f"a1/{j}/{HEAD}/sm90" for j in ("foreign2", "aa3")))):
        foreign, same = (got(f, "job.json")["seconds"] for f in folders)
        ratios.append(round(foreign["total"] / same["total"], 2))
        assert 146 <= round(foreign["total"]) <= 149
        assert round(foreign["machine factor"]) in (24, 25)
    assert ratios == [1.08, 1.49]
    secs = runs(SAME, "job.json")["seconds"]
    assert round(secs["A/B"]) == 70 and "machine factor" not in secs


@pytest.mark.parametrize("folder, benches, rows", [(FOREIGN, 21, 158), (FOREIGN2, 17, 208),
                                                   (SAME, 6, 174)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    da.check_ab_benches_own_rows(runs, folder, benches, rows)


def test_the_factor_at_five_samples_replayed_on_b1(runs, capsys):
    """scripts/factor_samples.py on b1's two foreign jobs (the twenty-sixth session's
    candidate, §16.20): each reproduces its stored screen at 10; at 5 the screen sends 48
    rows instead of 49, loses no real change, and takes 2,492 factor samples, not 4,699."""
    folders = [str(runs.top / f) for f in (FOREIGN, FOREIGN2)]
    assert factor_samples.main(folders + ["--min-samples", "5"]) == 0
    out = capsys.readouterr().out
    assert ("2 of 2 runs replayed to their stored screen; over those: rows sent 49 -> 48 at 5 "
            "samples, real changes no longer sent: 0 SLOWER, 0 FASTER; factor samples "
            "4699 -> 2492") in out
