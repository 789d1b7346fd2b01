"""The eleventh session's H100 call (docs/data/h100-two-minute-2026-12-05-f.tar.gz,
docs/measurement.md §9.11) read back on a CPU: the figures the docs quote are these
files' (test_real_h100_replay.py replays every job's verdicts with `harness report`)."""

from __future__ import annotations

from device_archives import archive_fixture

F1 = "f1/{}/82ffd795e41b/sm90"
runs = archive_fixture("h100-two-minute-2026-12-05-f.tar.gz", "h100-2026-12-05-f")


def test_the_fresh_and_warm_time_lines(runs):
    fresh = runs(F1.format("aa"), "job.json")
    warm = runs(F1.format("aa2"), "job.json")
    assert fresh["exit_code"] == warm["exit_code"] == 0
    assert round(fresh["seconds"]["total"]) == 117 and round(warm["seconds"]["total"]) == 102
    # the first minute of a fresh machine: the build and the case data it overlaps
    # (e1/e2 of the tenth session: 13 + 21 s and 17 + 20 s)
    stages = fresh["bench_stages_s"]
    assert (round(stages["build"]), round(stages["data"])) == (11, 6)
    assert stages["build"] + stages["data"] < 20
    assert round(warm["bench_stages_s"]["build"]) == 0
    # the parts the time line had left out
    for job in (fresh, warm):
        took = job["seconds"]
        assert 4 < took["torch + GPU start"] < 6
        assert took["A/B: measuring"] + took["A/B: start-up wait"] <= took["A/B"]
    assert (round(fresh["seconds"]["A/B"]), round(warm["seconds"]["A/B"])) == (24, 24)


def test_the_same_model_jobs_judge_every_row_and_fail_none(runs):
    for run in ("aa", "aa2"):
        for matrix, rows in (("production", 280), ("swiglu", 84)):
            gate = runs(F1.format(run), f"{matrix}.json")["gate"]
            assert gate["exit_code"] == 0 and len(gate["verdicts"]) == rows
            assert set(gate["verdicts"].values()) == {"SAME"}


def test_the_3pct_plant_fails_fp16_cache_and_nothing_else(runs):
    doc = runs(F1.format("plantedjob3"), "production.json")
    verdicts = doc["gate"]["verdicts"]
    slow = [k for k, v in verdicts.items() if v == "SLOWER"]
    assert {k.split("|")[1] for k in slow} == {"fp16_cache"} and len(slow) == 54
    planted = [k for k in verdicts if k.split("|")[1] == "fp16_cache" and k.endswith("|graph")]
    assert len(planted) == 56 and len(slow) / len(planted) >= 0.95
    # the one ERROR is a peer's row (not gating): Marlin's fused zero at M = 1024 read a
    # larger error on the re-check's fresh inputs
    errors = {k: v for k, v in verdicts.items() if v == "ERROR"}
    assert list(errors) == ["M1024-N2048-K8192-g128-s0|marlin_fused_zero|graph"]
    assert doc["gate"]["exit_code"] == 1
    took = runs(F1.format("plantedjob3"), "job.json")["seconds"]
    assert round(took["total"]) == 148
