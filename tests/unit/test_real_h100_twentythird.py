"""The twenty-third session's device call w1, a fresh H100 at 1768dae (the prestart of
51c281c-8721b61 on a GPU for the first time), read back on a CPU from
docs/data/h100-2026-12-06-w.tar.gz (docs/measurement.md §16.16): the foreign job fresh,
again with the baseline commits' builds cached, then the same-model job warm. The figures
the docs quote are these files'; test_real_h100_replay.py replays every job's verdicts
with `harness report`."""

from __future__ import annotations

import glob
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from device_archives import ab_measured, archive_fixture, check_every_gated_row_judged, check_job

runs = archive_fixture("h100-2026-12-06-w.tar.gz", "h100-2026-12-06-w")
HEAD = "1768dae60946"
UUID = "c5abf118-3ef7-bced-b7e0-fb82685d6990"
#: run folder -> (exit code, job seconds)
JOBS = {f"w1/foreign/{HEAD}/sm90": (0, 160), f"w1/foreign2/{HEAD}/sm90": (0, 149),
        f"w1/aa3/{HEAD}/sm90": (0, 70)}
FOREIGN = [f"w1/foreign/{HEAD}/sm90", f"w1/foreign2/{HEAD}/sm90"]
GSPLIT_FASTER = {"M16-N2048-K2048-g128-s0", "M16-N2048-K8192-g128-s0", "M16-N6144-K2048-g128-s0",
                 "M16-N8192-K2048-g128-s0"}


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    check_job(runs, folder, UUID, JOBS[folder])


@pytest.mark.parametrize("folder", FOREIGN)
def test_the_prestart_leaves_no_start_up_wait_and_the_same_verdicts(runs, folder):
    """Every gated row SAME or FASTER, gsplit's four decode rows and the SwiGLU pair FASTER;
    the factor's and the A/B's start-up waits 0 s (v2: 9 s and 4 s for the A/B)."""
    assert check_every_gated_row_judged(runs, folder) == {
        f"{cid}|marlin_asym|graph" for cid in GSPLIT_FASTER}
    seconds = runs(folder, "job.json")["seconds"]
    assert seconds["A/B: start-up wait"] == 0 and seconds["machine factor: start-up wait"] == 0


def test_every_ab_bench_timed_the_fourteen_fused_rows_it_was_not_asked_for(runs):
    """What made the A/B slower (64-65 s for 9-11 rows, v2: 41 s for 22): each of the nine
    benches of each foreign A/B wrote all 14 native_int4_fused pair rows ok, while no
    native_int4 pair row was in its row file (fixed by bench_rows.follow_native, 4a92d54)."""
    for folder in FOREIGN:
        assert not any(k.startswith("swiglu_pair") and "|native_int4" in k
                       for k in ab_measured(runs, folder))
        benches = glob.glob(str(runs.top / folder / "ab/production+swiglu/runs/round*/*/*/sm90"))
        assert len(benches) == 9
        for bench in benches:
            swiglu = pd.read_csv(f"{bench}/swiglu.csv")
            fused = swiglu[swiglu.path == "native_int4_fused"]
            assert len(fused) == 14 and (fused.status == "ok").all()
    summary = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[2] / "scripts"
                             / "acceptance_summary.py"), str(runs.top / FOREIGN[1])],
        capture_output=True, text=True, check=True).stdout
    assert "A/B benches: 9, 180 rows timed, 126 of them not in their row files" in summary
    # the SwiGLU matrix's share of the benches' time, from their "wall for this matrix" lines
    swiglu = sum(float(re.search(r"swiglu\.csv \(([\d.]+) s wall", log.read_text()).group(1))
                 for log in (runs.top / FOREIGN[1]).glob("ab/*/runs/round*/*.log")
                 if "shadow" not in log.name)
    assert round(swiglu) == 47
    seconds = [runs(f, "job.json")["seconds"]["A/B"] for f in FOREIGN]
    assert [round(s) for s in seconds] == [65, 64]
    assert [len(ab_measured(runs, f)) for f in FOREIGN] == [11, 9]


def test_the_foreign_job_against_the_same_model_job_warm(runs):
    """149 s against 70 s: 2.14x on this machine, the A/B's 64 s against 5 s."""
    same = runs(f"w1/aa3/{HEAD}/sm90", "job.json")["seconds"]
    warm = runs(FOREIGN[1], "job.json")["seconds"]
    assert round(warm["total"] / same["total"], 2) == 2.14
    assert [round(warm[k]) for k in ("machine factor", "A/B")] == [22, 64]
    assert round(same["A/B"]) == 5


def test_the_direction_rule_kept_a_plus_four_and_a_half_percent_from_failing(runs):
    """fp16_cache at M64-N2048-K8192-gK (unchanged) read +4.5% in the warm foreign job's
    A/B, every round, with the baseline commit's bench measuring that row alone: SAME
    (contradicted: the screen sent it as faster). The fresh job read it +0.1%."""
    key = "M64-N2048-K8192-gK-s0|fp16_cache|graph"
    warm = ab_measured(runs, FOREIGN[1])[key]
    assert warm["verdict"] == "SAME" and warm["source"] == "contradicted"
    assert round(warm["change"], 3) == 0.045
    fresh = ab_measured(runs, FOREIGN[0])[key]
    assert fresh["verdict"] == "SAME" and abs(fresh["change"]) < 0.002
    bench = runs.top / FOREIGN[1] / "ab/production+swiglu/runs/round1/A@f33d13cd33f1"
    one = pd.read_csv(glob.glob(f"{bench}/*/sm90/production.csv")[0])
    assert (one.status == "ok").sum() == 1
