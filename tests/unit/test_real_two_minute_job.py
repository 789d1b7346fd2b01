"""Real H100 jobs of issues 36-38 at 992f76d (tests/fixtures/two-minute-job-h100.tar.gz,
docs/measurement.md §9.7 and §16.4) read back on a CPU: the graph-only job on one H100
against the H200 baselines (fresh and warm), the same commit accepted as the H100's own
baseline and the same-model job after it, and a planted 3% on fp16_cache: every verdict
`harness report` reaches is the job's, and the figures the docs quote are these files'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_runs import unpack_fixture

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
C = "992f76da0df4/sm90"
#: run -> (baselines root in the fixture, exit code, rows)
RUNS = {f"c2/aa/{C}": ("baselines-ref", 0, 380), f"c4/aa/{C}": ("baselines-ref", 0, 380),
        f"c2/same/{C}": ("baselines-same", 0, 380),
        f"c2/plantedjob3/{C}": ("baselines-same", 1, 280)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return unpack_fixture("two-minute-job-h100.tar.gz", tmp_path_factory.mktemp("two-minute"))


@pytest.mark.parametrize("run", sorted(RUNS))
def test_report_reaches_each_jobs_verdicts(root, run, capsys, tmp_path):
    baselines, code, rows = RUNS[run]
    capsys.readouterr()
    assert main(["report", str(root / run), "--baseline", str(root / baselines),
                 "--out", str(tmp_path / "rep")]) == code
    assert f"verdicts agree with the bench's stored gate on all {rows} rows" \
        in capsys.readouterr().out
    job = json.loads((root / run / "job.json").read_text())
    assert job["exit_code"] == code


def _job(root: Path, run: str) -> dict:
    return json.loads((root / run / "job.json").read_text())["seconds"]


def test_the_time_lines_the_docs_quote(root):
    fresh, warm = _job(root, f"c2/aa/{C}"), _job(root, f"c4/aa/{C}")
    same = _job(root, f"c2/same/{C}")
    assert round(fresh["total"]) == 197 and round(warm["total"]) == 174
    assert round(same["total"]) == 100 and same["total"] <= 120      # the warm target
    assert fresh["nox start"] < 3 and same["nox start"] < 3          # no torch probe
    assert "machine factor" in warm and "machine factor" not in same
    assert warm["total"] / same["total"] > 1.5                       # issue 36: not met


def test_the_planted_3pct_fails_fp16_cache_and_nothing_else(root):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "acceptance_summary.py"),
         str(root / f"c2/plantedjob3/{C}"), "--plant", "fp16_cache"],
        capture_output=True, text=True, check=True).stdout
    assert "planted fp16_cache (graph): 56/56 SLOWER (100.0%), 0 other failing row(s)" in out
    # the spin cannot add less than its node: 6 rows were planted at the asked 3% (the
    # share each plan measured it delivers; by the plans' expected share, 44 above 6%)
    assert "<= 3.5%: 6/6 SLOWER" in out and "> 6%: 46/46 SLOWER" in out
