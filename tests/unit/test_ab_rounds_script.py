"""scripts/ab_rounds.py on the sixteenth session's stored jobs (docs/data/
h100-2026-12-06-p.tar.gz): each row's rounds as the A/B measured them, and the lift of a
foreign job's round 0 that docs/measurement.md §16.10 quotes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from device_archives import archive_fixture

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import ab_rounds  # noqa: E402  (a script, not a package)

runs = archive_fixture("h100-2026-12-06-p.tar.gz", "h100-2026-12-06-p")


def _run(runs, call, job):
    return runs.top / call / job / "d102c2b5f461" / "sm90"


def test_each_round_of_a_missed_planted_row(runs):
    """p4's planted 3%: a row read SAME at +1.85% after 7 rounds that ranged +1.0..+3.0%."""
    got = ab_rounds.lines(_run(runs, "p4", "plantedjob3"),
                          rows=("M1-N8192-K2048-gK-s0|fp16_cache",))
    assert got == ["M1-N8192-K2048-gK-s0|fp16_cache|graph SAME +1.85%; 7 rounds, mean "
                   "+1.95%, sd 0.83: r0:+1.20 r1:+1.43 r2:+1.82 r3:+0.99 r4:+2.19 "
                   "r5:+3.02 r6:+3.00"]


def test_a_foreign_jobs_round_0_is_the_screens_reading(runs):
    """p2's unchanged foreign job: the 13 extended rows each had round 0 (the job's own
    bench against the factor's) at +2.0% or more; the later rounds near 0."""
    rows = ab_rounds.rounds_of(_run(runs, "p2", "foreign"))
    extended = [line.split("|")[0] + "|" + line.split("|")[1]
                for line in ab_rounds.lines(_run(runs, "p2", "foreign"), extended=True)]
    assert len(extended) == 13
    for name in extended:
        per = rows[tuple(name.split("|")) + ("graph",)]
        assert len(per) == 7 and per[0][1] / per[0][0] - 1 > 0.02
    assert ab_rounds.summary(_run(runs, "p2", "foreign")).endswith(
        "14 rows; round 0 mean +2.44%, later rounds mean +0.43%; close calls on rounds 0-2: "
        "14 with B's round 0, 13 without; of the 13 rows judged on extra rounds, 13 on "
        "rounds 0-2, 5 on rounds 1-3")


def test_a_same_model_jobs_round_0_has_no_such_lift(runs):
    assert ab_rounds.summary(_run(runs, "p4", "aa")).endswith(
        "6 rows; round 0 mean -0.75%, later rounds mean -0.49%; close calls on rounds 0-2: "
        "3 with B's round 0, 3 without; of the 2 rows judged on extra rounds, 2 on rounds "
        "0-2, 1 on rounds 1-3")


@pytest.mark.parametrize("args, code, said", [
    (["--summary"], 0, "round 0 mean"), (["--path", "fp16_cache"], 0, "fp16_cache|graph")])
def test_the_command_line(runs, args, code, said):
    got = subprocess.run([sys.executable, str(ROOT / "scripts" / "ab_rounds.py"),
                          str(_run(runs, "p3", "foreign")), *args],
                         capture_output=True, text=True, check=False)
    assert got.returncode == code and said in got.stdout, got.stderr


def test_a_run_without_an_ab_says_so(tmp_path):
    got = subprocess.run([sys.executable, str(ROOT / "scripts" / "ab_rounds.py"),
                          str(tmp_path)], capture_output=True, text=True, check=False)
    assert got.returncode == 2 and "has no ab/ folder" in got.stderr
