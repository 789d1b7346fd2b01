"""The ninth session's three H100 calls (docs/data/h100-two-minute-2026-12-05.tar.gz,
docs/measurement.md §9.8 and §16.4) read back on a CPU: the figures the docs quote are these
files' (test_real_h100_replay.py replays every job's verdicts with `harness report`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from device_archives import unpack

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs" / "data" / "h100-two-minute-2026-12-05.tar.gz"
D1, D2, D3 = "d1/{}/fc1619417a5c/sm90", "d2/{}/688a16534c5f/sm90", "d3/{}/3782823ef2aa/sm90"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The archive unpacked, and a copy of baselines/ without models/ (the reference's)."""
    return unpack(ARCHIVE, tmp_path_factory.mktemp("h100"))


def _job(root: Path, run: str) -> dict:
    return json.loads((root / "h100-2026-12-05" / run / "job.json").read_text())


def test_the_time_lines_the_docs_quote(root):
    fresh, warm = _job(root, D2.format("aa")), _job(root, D2.format("aa2"))
    foreign = _job(root, D2.format("foreign"))
    assert (fresh["exit_code"], warm["exit_code"], foreign["exit_code"]) == (0, 0, 0)
    assert round(fresh["seconds"]["total"]) == 104 and fresh["seconds"]["total"] <= 150
    assert round(warm["seconds"]["total"]) == 80 and warm["seconds"]["total"] <= 120
    assert round(foreign["seconds"]["total"]) == 146
    assert "machine factor" in foreign["seconds"] and "machine factor" not in warm["seconds"]
    assert foreign["seconds"]["total"] / warm["seconds"]["total"] > 1.5    # issue 36: not met
    before = _job(root, D1.format("aa2"))["seconds"]
    assert round(before["total"]) == 144 and round(before["A/B"]) == 70


@pytest.mark.parametrize("run, slower", [("plantedjob3", 51), ("plantedjob", 56)])
def test_the_plants_fail_fp16_cache_and_nothing_else(root, run, slower):
    doc = json.loads((root / "h100-2026-12-05" / D3.format(run) / "production.json")
                     .read_text())
    verdicts = doc["gate"]["verdicts"]              # "case|path|mode" -> verdict
    slow = [k for k, v in verdicts.items() if v == "SLOWER"]
    assert {k.split("|")[1] for k in slow} == {"fp16_cache"} and len(slow) == slower
    assert doc["gate"]["exit_code"] == 1
    assert set(verdicts.values()) <= {"SLOWER", "SAME"}
