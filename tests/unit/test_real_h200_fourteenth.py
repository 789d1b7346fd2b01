"""The fourteenth session's H200 call k1 (docs/data/h200-2026-12-06-k.tar.gz,
docs/measurement.md §9.14) read back on a CPU: the figures the docs quote are these
files' (test_real_h100_replay.py replays every job's verdicts with `harness report`)."""

from __future__ import annotations

import statistics

from device_archives import archive_fixture

K1 = "k1/{}/ac2af219046d/sm90"
UUID = "5f0e068b-07b3-0e27-4935-00aeaa06da9c"
runs = archive_fixture("h200-2026-12-06-k.tar.gz", "h200-2026-12-06-k")


def _job(runs, run):
    return runs(K1.format(run), "job.json")


def test_one_h200(runs):
    for run in ("aa", "aa2", "plantedjob3", "plantedjob"):
        env = runs(K1.format(run), "production.json")["environment"]
        assert env["gpu_uuid"] == UUID and env["gpu_name"] == "NVIDIA H200", run


def test_the_fresh_and_the_warm_job_within_issue_37s_times(runs):
    fresh, warm = _job(runs, "aa"), _job(runs, "aa2")
    assert fresh["exit_code"] == warm["exit_code"] == 0
    assert round(fresh["seconds"]["total"]) == 102 and round(warm["seconds"]["total"]) == 98
    assert round(fresh["bench_stages_s"]["build"]) == 6
    assert round(warm["seconds"]["A/B: start-up wait"]) == 15
    assert [s["verdicts"] for s in warm["steps"]] == [
        {"SAME": 278, "FASTER": 2}, {"SAME": 84}, {"SAME": 16}]


def _planted(runs, run):
    gate = runs(K1.format(run), "production.json")["gate"]
    failing = {k for k, v in gate["verdicts"].items() if v == "SLOWER"}
    fp16 = [k for k in gate["verdicts"] if k.split("|")[1] == "fp16_cache"
            and k.endswith("|graph")]
    return gate, failing, fp16


def test_the_five_percent_plant_fails_every_row_of_its_path_and_no_other(runs):
    gate, failing, fp16 = _planted(runs, "plantedjob")
    assert gate["exit_code"] == 1 and len(fp16) == 56 and failing == set(fp16)
    assert round(_job(runs, "plantedjob")["seconds"]["total"]) == 120


def test_the_three_percent_plant_falls_short_of_95_percent_here(runs):
    """47 of 56 (83.9%), nothing else failing; the rows left SAME read -0.2%..+2.1% A/B."""
    gate, failing, fp16 = _planted(runs, "plantedjob3")
    assert gate["exit_code"] == 1 and len(failing) == 47 and failing <= set(fp16)
    ab = runs(K1.format("plantedjob3"), "production.json")["ab_confirm"]["rows"]
    same = [v["change"] for k, v in ab.items() if k in set(fp16) and v["verdict"] == "SAME"]
    assert len(same) == 9 and -0.003 < min(same) and max(same) < 0.022
    assert round(_job(runs, "plantedjob3")["seconds"]["total"]) == 129


def test_the_plan_was_shared_and_three_percent_on_the_rows_left_same(runs):
    plans = runs("k1/plantedjob3/plant-log", "plans.json")
    gate, failing, fp16 = _planted(runs, "plantedjob3")
    left = {tuple(int(x[1:]) for x in k.split("|")[0].split("-")[:3]) for k in fp16
            if k not in failing}
    shares = [p["measured_fraction"] for p in _plan_rows(plans)
              if (p["M"], p["N"], p["K"]) in left]
    assert shares and 0.027 < min(shares) and max(shares) < 0.032
    assert 0.027 < statistics.median(shares) < 0.032


def _plan_rows(plans: dict) -> list[dict]:
    """The shared plan file's rows: keys "MxNxK@fraction", values the plan."""
    out = []
    for key, plan in plans.items():
        m, n, k = (int(x) for x in key.split("@")[0].split("x"))
        out.append({"M": m, "N": n, "K": k, **plan})
    return out


# ------------------------------------------------------------- m1: the H100 of §16.8
M1 = "m1/{}/d1be0af4ca56/sm90"
REGRESS = "m1/regress/8ec9df0a2513/sm90"
h100 = archive_fixture("h100-2026-12-06-m.tar.gz", "h100-2026-12-06-m")


def test_m1_is_one_h100_judged_against_its_own_rows(h100):
    for run in (M1.format("aa2"), M1.format("aa3"), REGRESS):
        env = h100(run, "production.json")["environment"]
        assert env["gpu_uuid"] == "1f53731e-226f-fca5-111a-25191d6b3bbc", run
        assert "machine factor" not in h100(run, "job.json")["seconds"], run   # no projection


def test_m1_same_model_jobs_and_the_regression_on_top(h100):
    aa2, aa3, regress = (h100(r, "job.json") for r in
                         (M1.format("aa2"), M1.format("aa3"), REGRESS))
    assert aa2["exit_code"] == aa3["exit_code"] == 0
    assert (round(aa2["seconds"]["total"]), round(aa2["seconds"]["A/B"])) == (70, 0)
    assert (round(aa3["seconds"]["total"]), round(aa3["seconds"]["A/B"])) == (80, 14)
    assert regress["exit_code"] == 1 and round(regress["seconds"]["total"]) == 137
    for matrix, n in (("production", 56), ("swiglu", 14)):
        gate = h100(REGRESS, f"{matrix}.json")["gate"]
        slower = {k for k, v in gate["verdicts"].items() if v == "SLOWER"}
        assert len(slower) == n and {k.split("|")[1] for k in slower} == {"fp16_cache"}
        assert all(k.endswith("|graph") for k in slower)
