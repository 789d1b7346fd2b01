"""One verdict however a run is read: ``harness report`` and ``harness compare`` on a
stored run give the verdicts its bench printed, confirmation re-measurements included."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import load_settings
from harness.reports.gate import evaluate
from harness.reports.gate_record import write_gate_record
from harness.reports.synthetic import make_rows, resample
from harness.results.environment import Environment
from harness.results.store import RunMeta, load_run, write_run

S = load_settings("default")
ENV = Environment(arch="sm90", gpu_name="synthetic H200", torch="2.11.0", cuda="13.0",
                  driver="580", commit="a" * 40)
PLUGIN = str(Path(__file__).resolve().parents[1] / "planted" / "slowdown_plugin.py")


def _verdicts(csv_path: Path) -> dict[str, str]:
    with open(csv_path, newline="") as fh:
        return {"|".join((r["case_id"], r["path"], r["mode"])): r["verdict"]
                for r in csv.DictReader(fh)}


def test_stored_confirmations_are_replayed_by_report_and_compare(tmp_path, capsys):
    base = make_rows(ms=(1, 16, 64))
    write_run(tmp_path / "b0", base, RunMeta(matrix="synthetic", environment=ENV))
    assert main(["baseline", "accept", str(tmp_path / "b0"), "--root", str(tmp_path / "bl"),
                 "--yes"]) == 0
    # a run 6% slower on fp16_cache whose re-measurement comes back at +1% (a transient)
    cur = resample(base, 3, factor={"fp16_cache": 1.06})
    fresh = {r.key: r for r in resample(base, 4, factor={"fp16_cache": 1.01})}
    res = evaluate(cur, base, S, remeasure=lambda keys: [fresh[k] for k in keys])
    assert res.remeasured and all(v.first_verdict == "SLOWER" for v in res.verdicts if v.remeasured)
    run_dir = tmp_path / "run"
    write_run(run_dir, cur, RunMeta(matrix="synthetic", environment=ENV, settings=S.to_dict()))
    write_gate_record(run_dir / "synthetic.csv", res)
    assert len(load_run(run_dir).confirmations) == len(res.remeasured)
    stored = json.loads((run_dir / "synthetic.json").read_text())["gate"]
    assert stored["exit_code"] == res.exit_code == 0
    assert {c["first"] for c in stored["confirmations"].values()} == {"SLOWER"}
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "bl"),
                 "--out", str(tmp_path / "rep")]) == 0
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out
    assert _verdicts(tmp_path / "rep" / "report.csv") == stored["verdicts"]
    assert main(["compare", str(tmp_path / "bl" / "sm90"), str(run_dir),
                 "--out", str(tmp_path / "cmp")]) == 0
    assert _verdicts(tmp_path / "cmp" / "compare.csv") == stored["verdicts"]
    # without the stored confirmations the first readings would have failed the gate
    (run_dir / "confirm" / "synthetic.csv").unlink()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "bl"),
                 "--out", str(tmp_path / "r2")]) == 1
    assert "verdicts differ from the bench's stored gate" in capsys.readouterr().out


@pytest.mark.slow
def test_cpu_bench_report_and_compare_agree_row_for_row(tmp_path, capsys, monkeypatch):
    """End to end on the CPU: a bench gated against a baseline, with a planted slowdown
    (so rows get confirmed), then report and compare of what it stored."""
    from harness.engines import plugins as plugins_module
    from harness.kernels.base import PATHS

    monkeypatch.setattr(PATHS, "_paths", dict(PATHS._paths))     # the plugin's swap stays here
    loaded: list[dict] = []
    monkeypatch.setattr(plugins_module, "_PLUGIN_NAMESPACES", loaded)
    try:
        _bench_report_compare(tmp_path, capsys, monkeypatch, PATHS)
    finally:                                  # undo the plant while its registry is still here
        for namespace in loaded:
            namespace["_PLANT"].__exit__(None, None, None)


def _bench_report_compare(tmp_path, capsys, monkeypatch, PATHS):
    monkeypatch.setenv("HARNESS_PLANT_PATH", "native_int4")
    common = ["bench", "--cpu", "--matrix", "smoke", "--paths", "native_int4,fp16_cache",
              "--no-progress", "--set", "max_case_seconds=0.3", "--set", "gate_eager_speed=1"]
    assert main(common + ["--out", str(tmp_path / "r0"), "--no-compare"]) == 0
    [first] = list((tmp_path / "r0").glob("*/cpu"))
    assert main(["baseline", "accept", str(first), "--root", str(tmp_path / "bl"), "--yes"]) == 0
    rc = main(common + ["--out", str(tmp_path / "r1"), "--baselines", str(tmp_path / "bl"),
                        "--plugin", PLUGIN])
    # the plugin's swap outlives the plugin file's run (an early version lost it when the
    # file's namespace was freed, and a planted run on the GPU then measured nothing planted)
    assert type(PATHS.get("native_int4")).__name__ == "SlowdownPath"
    [run_dir] = list((tmp_path / "r1").glob("*/cpu"))
    stored = json.loads((run_dir / "smoke.json").read_text())["gate"]
    assert stored["exit_code"] == rc and stored["verdicts"]
    capsys.readouterr()
    got = main(["report", str(run_dir), "--baseline", str(tmp_path / "bl"),
                "--out", str(tmp_path / "rep")])
    assert got == rc
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out
    assert _verdicts(tmp_path / "rep" / "report.csv") == stored["verdicts"]
    got = main(["compare", str(tmp_path / "bl" / "cpu"), str(run_dir),
                "--out", str(tmp_path / "cmp"),
                "--set", "gate_eager_speed=1", "--set", "max_case_seconds=0.3"])
    assert got == rc and _verdicts(tmp_path / "cmp" / "compare.csv") == stored["verdicts"]
