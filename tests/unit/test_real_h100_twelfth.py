"""The twelfth session's H100 call (docs/data/h100-two-minute-2026-12-05-g.tar.gz,
docs/measurement.md §9.12 and §16.6) read back on a CPU: the figures the docs quote are
these files' (test_real_h100_replay.py replays every job's verdicts with `harness report`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from device_archives import unpack

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs" / "data" / "h100-two-minute-2026-12-05-g.tar.gz"
TOP = "h100-2026-12-05-g"
G1 = "g1/{}/82ffd795e41b/sm90"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return unpack(ARCHIVE, tmp_path_factory.mktemp("h100g"))


def _json(root: Path, run: str, name: str) -> dict:
    return json.loads((root / TOP / G1.format(run) / name).read_text())


def test_one_gpu_and_one_commit(root):
    for run in ("aa", "aa2", "foreign"):
        env = _json(root, run, "production.json")["environment"]
        assert env["gpu_uuid"] == "32024bb9-ba1d-d879-68f5-55eaab9a778c", run
        assert _json(root, run, "job.json")["commit"] == "82ffd795e41b"


def test_the_fresh_and_warm_same_model_jobs(root):
    fresh, warm = _json(root, "aa", "job.json"), _json(root, "aa2", "job.json")
    assert fresh["exit_code"] == warm["exit_code"] == 0
    assert round(fresh["seconds"]["total"]) == 90 and round(warm["seconds"]["total"]) == 76
    assert (round(fresh["bench_stages_s"]["build"]), round(fresh["bench_stages_s"]["data"])) \
        == (6, 5)
    assert round(warm["bench_stages_s"]["build"]) == 0
    for matrix, rows in (("production", 280), ("swiglu", 84)):
        gate = _json(root, "aa", f"{matrix}.json")["gate"]
        assert gate["exit_code"] == 0 and len(gate["verdicts"]) == rows
        assert set(gate["verdicts"].values()) == {"SAME"}
    # the warm job: one peer row (not gating) read WORSE_ACCURACY: one of its five runs
    # on identical inputs was over the bound (two distinct outputs)
    verdicts = _json(root, "aa2", "production.json")["gate"]["verdicts"]
    odd = {k: v for k, v in verdicts.items() if v != "SAME"}
    assert odd == {"M128-N8192-K2048-g128-s0|marlin_fused_zero|graph": "WORSE_ACCURACY"}


def test_the_foreign_job_and_its_ratio_to_the_warm_same_model_job(root):
    foreign, warm = _json(root, "foreign", "job.json"), _json(root, "aa2", "job.json")
    took = foreign["seconds"]
    assert foreign["exit_code"] == 0 and round(took["total"]) == 117
    assert (round(took["machine factor"]), round(took["machine factor: measuring"]),
            round(took["machine factor: start-up wait"])) == (34, 29, 4)
    assert round(took["A/B"]) == 21
    # issue 36 asks at most 1.5x; e2 of the tenth session read 1.72x
    ratio = took["total"] / warm["seconds"]["total"]
    assert round(ratio, 2) == 1.53 and ratio > 1.5
    settings = _json(root, "foreign", "production.json")["settings"]
    assert settings["projection_min_samples"] == 10


def test_the_foreign_job_judges_every_gated_row(root):
    for matrix, same in (("production", 224), ("swiglu", 70)):
        gate = _json(root, "foreign", f"{matrix}.json")["gate"]
        values = list(gate["verdicts"].values())
        assert gate["exit_code"] == 0 and values.count("SAME") == same
        assert set(values) == {"SAME", "TIMING_NOT_COMPARABLE"}
