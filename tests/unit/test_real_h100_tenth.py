"""The tenth session's two H100 calls (docs/data/h100-two-minute-2026-12-05-e.tar.gz,
docs/measurement.md §9.9 and §16.5) read back on a CPU: the figures the docs quote are these
files' (test_real_h100_replay.py replays every job's verdicts with `harness report`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from device_archives import unpack

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs" / "data" / "h100-two-minute-2026-12-05-e.tar.gz"
E1, E2 = "e1/{}/07769aef7973/sm90", "e2/{}/5d57ec3cbb60/sm90"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The archive unpacked, and a copy of baselines/ without models/ (the reference's)."""
    return unpack(ARCHIVE, tmp_path_factory.mktemp("h100e"))


def _job(root: Path, run: str) -> dict:
    return json.loads((root / "h100-2026-12-05-e" / run / "job.json").read_text())


def _doc(root: Path, run: str, matrix: str = "production") -> dict:
    return json.loads((root / "h100-2026-12-05-e" / run / f"{matrix}.json").read_text())


def test_the_time_lines_the_docs_quote(root):
    seconds = {run: _job(root, run)["seconds"]["total"] for run in (
        E1.format("aa"), E1.format("foreign"), E2.format("aa"), E2.format("aa2"),
        E2.format("foreign"))}
    assert {r: round(s) for r, s in seconds.items()} == {
        E1.format("aa"): 128, E1.format("foreign"): 149,
        E2.format("aa"): 147, E2.format("aa2"): 91, E2.format("foreign"): 157}
    e1f = _job(root, E1.format("foreign"))["seconds"]
    e2f = _job(root, E2.format("foreign"))["seconds"]
    assert (round(e1f["machine factor"]), round(e1f["A/B"])) == (28, 56)
    assert (round(e2f["machine factor"]), round(e2f["A/B"])) == (57, 29)
    # issue 36's ratio against the warm same-model job on the same machine: not met
    assert round(seconds[E2.format("foreign")] / seconds[E2.format("aa2")], 2) == 1.72
    assert _job(root, E1.format("plantedjob3"))["exit_code"] == 1


def test_the_3pct_plant_fails_fp16_cache_and_nothing_else(root):
    doc = _doc(root, E1.format("plantedjob3"))
    verdicts = doc["gate"]["verdicts"]              # "case|path|mode" -> verdict
    slow = [k for k, v in verdicts.items() if v == "SLOWER"]
    assert {k.split("|")[1] for k in slow} == {"fp16_cache"} and len(slow) == 55
    assert sum(k.split("|")[1] == "fp16_cache" for k in verdicts) == 56
    assert len(slow) / 56 >= 0.95
    assert doc["gate"]["exit_code"] == 1


def test_the_foreign_jobs_projection_and_ab(root):
    """e1 measured 4 rows per class at the baseline's commits and sent 43 rows to A/B;
    e2 measured every gated row there and sent 6. Each A/B was one compare, its A side in
    two parts (the baseline's rows name two commits)."""
    sent = {}
    for run in (E1.format("foreign"), E2.format("foreign")):
        measured, to_ab = 0, 0
        for matrix in ("production", "swiglu"):
            ab = _doc(root, run, matrix)["ab_confirm"]
            measured += len(ab["projection"]["measured"])
            to_ab += sum(r.get("source") != "projected" for r in ab["rows"].values())
        sent[run] = (measured, to_ab)
        rounds = root / "h100-2026-12-05-e" / run / "ab"
        compares = [p.name for p in rounds.iterdir() if p.name != "projection"]
        assert len(compares) == 1
        benches = sorted(p.name for p in (rounds / compares[0] / "runs" / "round0").iterdir()
                         if p.is_dir())
        assert benches == ["A@acffbe3b1f93", "A@f33d13cd33f1", "B"]
    assert sent == {E1.format("foreign"): (76, 43), E2.format("foreign"): (224, 6)}
