"""The twenty-ninth session's device calls d1 and e1, two more fresh H100s at f380eb5
(docs/measurement.md §16.22), read back on a CPU from docs/data/h100-2026-12-07-d.tar.gz:
on each, the foreign job fresh and the real regression (fp16_cache through a temporary)
judged as foreign, both with the machine factor's benches at 5 samples a row
(`--set projection_min_samples=5`, the default since); and f1, from
docs/data/h100-2026-12-07-f.tar.gz: a sixth fresh H100 at that commit, the same-model job
alone, fresh. The figures the docs quote are these files'; test_real_h100_replay.py
replays the five jobs' verdicts with `harness report`."""

from __future__ import annotations

import sys

import device_archives as da
import pytest

sys.path.insert(0, str(da.ROOT / "scripts"))
import factor_samples  # noqa: E402

runs = da.archive_fixture("h100-2026-12-07-d.tar.gz", "h100-2026-12-07-d")
runs_f = da.archive_fixture("h100-2026-12-07-f.tar.gz", "h100-2026-12-07-f")
HEAD = "f380eb5c78ca"
#: f1, a sixth fresh H100 at f380eb5 (GPU-7b5f9aac...): the same-model job alone, fresh
SAME_FRESH = f"f1/aa/{HEAD}/sm90"
UUIDS = {"d1": "8622038d-c35e-02cf-c1db-e23d53e9ce5c", "e1": "a41d6d0f-dcea-1174-e29f-a70ac86a0d9e"}
FOREIGN = {m: f"{m}/foreign/{HEAD}/sm90" for m in UUIDS}
REGRESS = {"d1": "d1/regressforeign/c71d45d7153f/sm90", "e1": "e1/regressforeign/5063c3422cb7/sm90"}
#: run folder -> (machine, exit code, job seconds)
JOBS = {FOREIGN["d1"]: ("d1", 0, 184), REGRESS["d1"]: ("d1", 1, 199),
        FOREIGN["e1"]: ("e1", 0, 128), REGRESS["e1"]: ("e1", 1, 187)}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_exit_time_and_factor_minimum(runs, folder):
    da.check_factor_job(runs, folder, JOBS, UUIDS)


@pytest.mark.parametrize("machine", sorted(UUIDS))
def test_the_unchanged_commit_passes_with_every_gated_row_judged_at_five(runs, machine):
    """Fresh, at 5 samples a row: no gated row TIMING_NOT_COMPARABLE, no false alarm, the
    production rows read FASTER are gsplit's five, as at 10 on a1, b1 and c1."""
    faster = {k.split("|")[0] for k in da.check_every_gated_row_judged(runs, FOREIGN[machine])}
    assert faster == da.GSPLIT_FASTER
    assert da.failing(runs, FOREIGN[machine]) == {}


@pytest.mark.parametrize("machine, sent, lo, hi", [("d1", 86, 0.044, 0.253),
                                                   ("e1", 85, 0.051, 0.247)])
def test_the_regression_fails_fp16_cache_and_nothing_else_at_five(runs, machine, sent, lo, hi):
    """fp16_cache's 56 production and 14 SwiGLU rows SLOWER (+4.4% to +25.3% on d1, +5.1%
    to +24.7% on e1, against the baseline's commit on the runner) and no other path's:
    the factor at 5 samples sent every one of them to the A/B."""
    folder = REGRESS[machine]
    assert da.failing(runs, folder) == {("production", "fp16_cache"): 56,
                                        ("swiglu", "fp16_cache"): 14}
    rows = {f"{m}:{k}": v for m in ("production", "swiglu")
            for k, v in runs(folder, f"{m}.json")["ab_confirm"]["rows"].items()}
    slower = [v["change"] for v in rows.values() if v["verdict"] == "SLOWER"]
    assert len(slower) == 70 and (round(min(slower), 3), round(max(slower), 3)) == (lo, hi)
    assert len(da.ab_sent(runs, folder)) == sent


def test_each_job_replays_to_its_stored_screen_at_five(runs, capsys):
    """scripts/factor_samples.py: all four jobs' screens rebuilt exactly from their factor
    samples at their own minimum (5)."""
    folders = [str(runs.top / f) for f in sorted(JOBS)]
    assert factor_samples.main(folders) == 0
    assert ("4 of 4 runs replayed to their stored screen; over those: rows sent 210 -> 210 at 5 "
            "samples, real changes no longer sent: 0 SLOWER, 0 FASTER; factor samples "
            "5164 -> 5164") in capsys.readouterr().out


def test_where_the_fresh_foreign_jobs_time_went(runs):
    """The two fresh jobs at 5: the factor 22.9 s and 19.5 s; the A/B 61.5 s for 21 rows
    (five of them four extra rounds) against 29.4 s for 18 (none): between fresh machines
    the A/B moves the job more than the factor's minimum does."""
    secs = {m: runs(FOREIGN[m], "job.json")["seconds"] for m in UUIDS}
    assert [round(secs[m]["machine factor"], 1) for m in ("d1", "e1")] == [22.9, 19.5]
    assert [round(secs[m]["A/B"], 1) for m in ("d1", "e1")] == [61.5, 29.4]


@pytest.mark.parametrize("folder, benches, rows", [(FOREIGN["d1"], 21, 172),
                                                   (REGRESS["d1"], 17, 524),
                                                   (FOREIGN["e1"], 9, 108),
                                                   (REGRESS["e1"], 21, 548)])
def test_every_ab_bench_timed_only_its_own_rows(runs, folder, benches, rows):
    da.check_ab_benches_own_rows(runs, folder, benches, rows)


def test_the_fresh_foreign_jobs_against_a_fresh_same_model_job(runs, runs_f):
    """f1's fresh same-model job at f380eb5: 76 s, every gated row SAME or FASTER, nothing
    sent to its A/B. Against it the fresh foreign jobs at 5 samples are 1.68x (e1) and
    2.42x (d1): the 1.5x line is not met fresh either."""
    da.check_job(runs_f, SAME_FRESH, "7b5f9aac-c7a2-3c9c-7366-e3a1085d9500", (0, 76))
    assert da.failing(runs_f, SAME_FRESH) == {}
    assert runs_f(SAME_FRESH, "production.json").get("ab_confirm") is None
    same = runs_f(SAME_FRESH, "job.json")["seconds"]["total"]
    ratios = [round(runs(FOREIGN[m], "job.json")["seconds"]["total"] / same, 2)
              for m in ("e1", "d1")]
    assert ratios == [1.68, 2.42]
