"""``harness study gate --cpu``: calibration in separate processes, and a
study continued with ``--resume``."""

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.studies import gate_study

#: The planted slowdown is a test double: the study takes it from the test suite.
PLANTER = str(Path(__file__).resolve().parents[1] / "planted" / "slowdown_planter.py")
ARGS = ["--cpu", "--matrix", "smoke", "--filter", "M <= 4", "--paths", "native_int4,fp16_cache",
        "--plant", "fp16_cache", "--planter", PLANTER, "--calibration-runs", "2",
        "--set", "max_case_seconds=0.02", "--set", "warmup_ms=1"]


@pytest.mark.slow     # ~7 s on 2 cores: it runs several CPU benches
def test_resume_reuses_the_calibration_and_numbers_on(tmp_path):
    out = tmp_path / "study"
    assert gate_study.main(ARGS + ["--out", str(out), "--reps", "1"]) == 0
    baseline = (out / "baselines" / "cpu" / "smoke.csv").read_bytes()
    # each calibration run was a `harness bench` process of its own, the first is the baseline
    assert sorted(p.name for p in (out / "calibration").iterdir()) == ["p1", "p2"]
    meta = json.loads((out / "baselines" / "cpu" / "smoke.json").read_text())
    assert "separate processes" in meta["source"] and meta["calibration"]["runs"] == 2
    with pytest.raises(SystemExit, match="exists; choose a new --out or --resume"):
        gate_study.main(ARGS + ["--out", str(out), "--reps", "2"])
    assert gate_study.main(ARGS + ["--out", str(out), "--reps", "2", "--resume"]) == 0
    v = pd.read_csv(out / "verdicts.csv")
    assert sorted(v["rep"].unique()) == [1, 2]
    assert set(v[v["rep"] == 2]["kind"]) == {"aa", "planted"}
    assert (out / "baselines" / "cpu" / "smoke.csv").read_bytes() == baseline   # not recalibrated
    segments = json.loads((out / "segments.json").read_text())
    assert [s["reps"] for s in segments] == [[1, 1], [2, 2]] and segments[1]["resumed"]
    md = (out / "gate_study.md").read_text()
    assert "repetitions 2-2" in md and "2 repetitions" in md


def test_calibration_in_process_is_still_available(tmp_path):
    out = tmp_path / "study"
    assert gate_study.main(ARGS + ["--out", str(out), "--reps", "1", "--calibrate-in-process"]) == 0
    assert not (out / "calibration").exists()
    meta = json.loads((out / "baselines" / "cpu" / "smoke.json").read_text())
    assert "in-process" in meta["source"]


def test_resume_refuses_other_options(tmp_path):
    out = tmp_path / "study"
    assert gate_study.main(ARGS + ["--out", str(out), "--reps", "1", "--calibrate-in-process"]) == 0
    other = [a if a != "native_int4,fp16_cache" else "fp16_cache" for a in ARGS]
    with pytest.raises(SystemExit, match="--resume: paths was"):
        gate_study.main(other + ["--out", str(out), "--reps", "2", "--resume"])
    with pytest.raises(SystemExit, match="--resume: settings was"):
        gate_study.main(ARGS + ["--out", str(out), "--reps", "2", "--resume",
                                "--set", "min_effect=0.1"])


def test_resume_needs_a_study(tmp_path):
    with pytest.raises(SystemExit, match="does not exist"):
        gate_study.main(ARGS + ["--out", str(tmp_path / "none"), "--reps", "1", "--resume"])
