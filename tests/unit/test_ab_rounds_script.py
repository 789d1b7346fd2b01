"""scripts/ab_rounds.py on stored jobs (docs/data/h100-2026-12-06-p.tar.gz, the sixteenth
session's; -07-b and -07-i for the early-stop study): each row's rounds as the A/B measured
them, the lift of a foreign job's round 0 that docs/measurement.md §16.10 quotes, and what
stopping the extra rounds early would have saved (§16.24)."""

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


runs_b = archive_fixture("h100-2026-12-07-b.tar.gz", "h100-2026-12-07-b")
runs_i = archive_fixture("h100-2026-12-07-i.tar.gz", "h100-2026-12-07-i")


def test_stopping_early_would_not_have_lost_the_planted_three_percent(runs):
    """p4's planted 3% (44 rows on extra rounds): 11 would have stopped SLOWER at 4-5
    rounds, the rest needed all 7, so the job needed 7; none would have stopped SAME."""
    measured, need, stops, wrong = ab_rounds.sequential(_run(runs, "p4", "plantedjob3"))
    assert (measured, need, len(stops), wrong) == (7, 7, 44, [])
    assert sorted(stops)[:11] == [4] * 6 + [5] * 5 and stops.count(7) == 33


def test_stopping_early_on_foreign_jobs_at_f380eb5(runs_b, runs_i):
    """i1's fresh foreign job: 10 rows on extra rounds, one of them undecided until the
    seventh; b1's warm one (whose extra rounds held an empty bench for a commit with no
    row left: its folder has no CSV and is skipped) could have stopped after six."""
    got = ab_rounds.sequential_report(
        [runs_i.top / "i1" / "foreign" / "f380eb5c78ca" / "sm90",
         runs_b.top / "b1" / "foreign2" / "f380eb5c78ca" / "sm90"])
    assert got[-1] == ("2 jobs, 15 rows on extra rounds; jobs by rounds needed: {6: 1, 7: 1}; "
                       "extra rounds saved 1 of 8; lost slowdowns 0, false alarms 0")
    assert "stop rounds [4, 4, 4, 5, 5, 5, 5, 6, 6, 7]; the job needed 7 of 7" in got[0]


def test_an_early_verdict_against_the_stored_one_is_counted(monkeypatch, tmp_path):
    """Synthetic rounds: a row far above the line by its fourth round that the job read
    SAME is a false alarm; one far below that it read SLOWER a lost slowdown; a row
    with only its first three rounds is not on extra rounds."""
    key = ("c", "p", "graph")
    steady = {r: (100.0, t) for r, t in enumerate([110.0, 110.2, 109.8, 110.1, 110.0])}
    low = {r: (100.0, t) for r, t in enumerate([100.1, 99.9, 100.0, 100.1, 99.9])}
    three = {r: (100.0, 101.0) for r in range(3)}
    monkeypatch.setattr(ab_rounds, "rounds_of", lambda run, mode="graph": {
        key: steady, ("d", "p", "graph"): low, ("e", "p", "graph"): three})
    monkeypatch.setattr(ab_rounds, "stored_readings", lambda run: {
        "c|p|graph": {"verdict": "SAME", "rounds": 5},
        "d|p|graph": {"verdict": "SLOWER", "rounds": 5},
        "e|p|graph": {"verdict": "SAME"}})
    assert ab_rounds.sequential(tmp_path) == (5, 4, [4, 4], ["FALSE c|p|graph",
                                                             "LOST d|p|graph"])


def test_several_runs_need_the_sequential_option(runs):
    run = str(_run(runs, "p3", "foreign"))
    script = str(ROOT / "scripts" / "ab_rounds.py")
    got = subprocess.run([sys.executable, script, run, run], capture_output=True, text=True,
                         check=False)
    assert got.returncode == 2 and "except with --sequential" in got.stderr
    got = subprocess.run([sys.executable, script, run, run, "--sequential"],
                         capture_output=True, text=True, check=False)
    assert got.returncode == 0 and got.stdout.splitlines()[-1].startswith("2 jobs, "), got.stderr
