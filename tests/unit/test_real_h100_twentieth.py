"""The twentieth session's H100 call t1 (docs/data/h100-2026-12-06-t.tar.gz,
docs/measurement.md §16.13), at 6de0b5d (gsplit, the correction at decode since 0ba1d1a),
read back on a CPU: the figures the docs quote are these files' (test_real_h100_replay.py
replays every job's verdicts with `harness report`)."""

from __future__ import annotations

import pytest
from device_archives import archive_fixture, check_job, failing, gated_verdicts

from harness.config import load_settings
from harness.engines.ab_pending import contradicted, stored_gate
from harness.engines.projection_step import project
from harness.reports.ab_confirm import ABRow
from harness.results.store import load_run

runs = archive_fixture("h100-2026-12-06-t.tar.gz", "h100-2026-12-06-t")
HEAD = "6de0b5d2b69a"
UUID = "566c5f88-a17b-2aa6-930a-1277d67dc52b"
#: run folder -> (exit code, job seconds)
JOBS = {f"t1/aa/{HEAD}/sm90": (0, 121), f"t1/foreign/{HEAD}/sm90": (0, 173),
        "t1/regressforeign/ecada57a4211/sm90": (1, 241)}
#: the M16 g128 rows whose correction changed from stream to gsplit
M16_G128 = ("M16-N2048-K2048-g128-s0", "M16-N2048-K8192-g128-s0", "M16-N6144-K2048-g128-s0",
            "M16-N8192-K2048-g128-s0")


@pytest.mark.parametrize("folder", sorted(JOBS))
def test_each_job_its_card_commit_exit_and_time(runs, folder):
    check_job(runs, folder, UUID, JOBS[folder])


def test_the_unchanged_commit_on_a_foreign_model_reads_same_on_every_gated_row(runs):
    for matrix, n in (("production", 56), ("swiglu", 14)):
        gated = gated_verdicts(runs, f"t1/foreign/{HEAD}/sm90", matrix)
        assert all(v == ["SAME"] * n for v in gated.values()), (matrix, gated)


def test_the_regression_fails_fp16_cache_and_nothing_else(runs):
    assert failing(runs, "t1/regressforeign/ecada57a4211/sm90") == {
        ("production", "fp16_cache"): 56, ("swiglu", "fp16_cache"): 14}


def test_gsplit_reads_faster_on_the_h100s_own_baseline_and_same_projected_on_the_h200s(runs):
    """The same M16 g128 rows: FASTER against the H100's own baseline (stream at decode),
    but SAME on the foreign job, whose one-sided screen left them 'projected' although
    they were 3.1-12.1% faster than the baseline's commit measured on this H100: the gap
    the two-sided foreign screen (962674c) closes."""
    gate = runs(f"t1/aa/{HEAD}/sm90", "production.json")["gate"]["verdicts"]
    faster = sorted(k.split("|")[0] for k, v in gate.items() if v == "FASTER")
    assert faster == ["M16-N2048-K2048-g128-s0", "M16-N2048-K8192-g128-s0",
                      "M16-N6144-K2048-g128-s0"]
    assert {k.split("|")[1] for k, v in gate.items() if v == "FASTER"} == {"marlin_asym"}
    rows = runs(f"t1/foreign/{HEAD}/sm90", "production.json")["ab_confirm"]["rows"]
    got = {cid: (rows[f"{cid}|marlin_asym|graph"]["source"],
                 round(rows[f"{cid}|marlin_asym|graph"]["change"], 3)) for cid in M16_G128}
    assert got == {"M16-N2048-K2048-g128-s0": ("projected", -0.045),
                   "M16-N2048-K8192-g128-s0": ("projected", -0.121),
                   "M16-N6144-K2048-g128-s0": ("projected", -0.042),
                   "M16-N8192-K2048-g128-s0": ("projected", -0.031)}


def test_where_the_foreign_jobs_time_goes(runs):
    """Same-model 121 s (fresh: build 10 + data 6 inside its bench), foreign 173 s after
    it on the same machine: machine factor 25 s, the baseline commit's build 12 s, an A/B
    of 62 s against the same-model job's 30 s."""
    same = runs(f"t1/aa/{HEAD}/sm90", "job.json")["seconds"]
    foreign = runs(f"t1/foreign/{HEAD}/sm90", "job.json")["seconds"]
    assert round(foreign["total"] / same["total"], 2) == 1.43
    assert [round(foreign[k]) for k in ("machine factor", "A/B builds", "A/B")] == [25, 12, 62]
    assert round(same["A/B"]) == 30


# ---------------------------------------------------------------- t2: the two-sided screen
T2 = "t2/foreign/962674c11f31/sm90"
BIMODAL = ("M256-N2048-K2048-gK-s0", "marlin_asym", "graph")


def test_the_two_sided_screen_calls_gsplits_rows_faster_on_a_foreign_model(runs):
    """t2 at 962674c (fresh H100 GPU-3ac7452d): the M16 g128 rows t1 left 'projected' are
    now A/B'd and read FASTER (-4.1% to -13.1%), the unchanged paths SAME."""
    check_job(runs, T2, "3ac7452d-c2aa-3b34-2745-e9aa8b120e02", (1, 176))
    rows = runs(T2, "production.json")["ab_confirm"]["rows"]
    faster = {k.split("|")[0]: round(v["change"], 3) for k, v in rows.items()
              if v["verdict"] == "FASTER"}
    assert faster == {"M16-N2048-K2048-g128-s0": -0.056, "M16-N2048-K8192-g128-s0": -0.131,
                      "M16-N6144-K2048-g128-s0": -0.041, "M16-N8192-K2048-g128-s0": -0.045,
                      "M256-N2048-K8192-g128-s0": -0.034}
    assert {k.split("|")[1] for k in rows if rows[k]["verdict"] == "FASTER"} == {"marlin_asym"}
    assert failing(runs, T2) == {("production", "marlin_asym"): 1}


def test_the_false_alarm_was_a_faster_screened_row_that_the_rule_now_reads_same(runs):
    """The one failing row: the job's bench read it at 19.99 us, the factor's bench of the
    baseline's commit at 20.43 us (-2.1% on the screen: sent to A/B as faster); the A/B's
    three rounds read the baseline's commit at 19.93-20.04 us and this commit at
    20.44-20.60 us (+2.76%, SLOWER). Re-screened here from the stored rows, the row was
    sent for FASTER alone, so under the rule of 10e5eb8 its A/B reading is 'contradicted'
    and reads SAME."""
    settings = load_settings("default")
    top = runs.top / T2
    gate = stored_gate(top, "production", runs.top.parent / "reference", "sm90", settings)
    measured = {}
    for folder in (top / "ab" / "projection").glob("base-*/*/sm90"):
        if ".shadow" in folder.parent.parent.name:      # measured nothing (pipeline.shadow)
            continue
        for r in load_run(folder / "production.csv").rows:
            if r.status == "ok":             # each bench measured its own commit's rows
                measured[("production", r.key)] = r
    proj = project(gate.result, "production", measured, settings,
                   reference_model="NVIDIA H200", runner_model="NVIDIA H100 80GB HBM3")
    assert BIMODAL in {v.key for v in proj.screened}
    verdict, change, _ = proj.screen_readings[BIMODAL]
    assert (verdict, round(change, 3)) == ("FASTER", -0.021)
    assert proj.directions[BIMODAL] == frozenset({"FASTER"})
    stored = runs(T2, "production.json")["ab_confirm"]["rows"]["|".join(BIMODAL)]
    row = contradicted(ABRow(*BIMODAL, stored["verdict"], stored["change"],
                             stored["threshold"]), proj)
    assert (row.verdict, row.source, round(row.change, 4)) == ("SAME", "contradicted", 0.0276)
    # every other A/B call of t2 went the way the screen sent its row
    others = [
        k for k, v in runs(T2, "production.json")["ab_confirm"]["rows"].items()
        if not v.get("source") and tuple(k.split("|")) != BIMODAL
        and contradicted(ABRow(*k.split("|"), v["verdict"], v["change"], v["threshold"]),
                         proj).source == "contradicted"]
    assert others == []
