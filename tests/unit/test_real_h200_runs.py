"""Real H200 runs (tests/fixtures/h200-fleet.tar.gz: two `nox -s bench-sm90` runs on fresh
machines, docs/measurement.md §9.1) read back on a CPU: `harness report` reaches the
verdicts each job printed, row for row, and `harness merge` puts both machines and a CPU
run made here in one report with one exit code (issue #19's acceptance, with the page
opened in Chromium in test_html_chromium.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from fleet_runs import REAL_GPUS, real_fleet

from harness.cli import main


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    return root, real_fleet(root)


@pytest.mark.parametrize("commit", sorted(REAL_GPUS))
def test_report_reaches_the_jobs_verdicts_on_each_real_run(fleet, commit, capsys, tmp_path):
    root, dirs = fleet
    job = json.loads((dirs[commit] / "job.json").read_text())
    assert job["exit_code"] == 0 and [s["rows"] for s in job["steps"]] == [560, 168, 16]
    capsys.readouterr()
    assert main(["report", str(dirs[commit]), "--baseline", str(root / "baselines"),
                 "--out", str(tmp_path / "rep")]) == job["exit_code"]
    out = capsys.readouterr().out
    assert "verdicts agree with the bench's stored gate on all 744 rows" in out
    frame = pd.read_csv(tmp_path / "rep" / "report.csv")
    assert set(frame["verdict"]) == {"SAME"} and len(frame) == 744
    # the job's A/B readings are replayed: the screened rows say what A/B found
    assert frame["reasons"].astype(str).str.contains("A/B screen: A/B on this machine").sum() >= 2


def test_merge_of_two_h200s_and_a_cpu_run(fleet, capsys, tmp_path):
    root, dirs = fleet
    capsys.readouterr()
    out = tmp_path / "merged"
    assert main(["merge", str(root / "fleet"), "--baseline", str(root / "baselines"),
                 "--out", str(out)]) == 0
    said = capsys.readouterr().out
    for uuid in REAL_GPUS.values():
        assert f"sm90 @ vm [GPU {uuid[:8]}]" in said
    assert said.count("verdicts agree with the bench's stored gate on all 744 rows") == 2
    assert "harness merge: exit 0 (pass)" in said
    merged = pd.read_csv(out / "merged.csv")
    assert set(merged["arch"]) == {"cpu", "sm90"}
    assert len(merged[merged["arch"] == "sm90"]) == 2 * 744
    html = (out / "index.html").read_text()
    assert 'id="arch-cpu"' in html and 'id="arch-sm90"' in html
    assert all(uuid in html for uuid in REAL_GPUS.values())
