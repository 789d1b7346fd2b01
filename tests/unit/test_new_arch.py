"""CI can tell "nothing to compare" from "passed", and a job on the wrong runner from a
pass: the first run on an arch without baselines exits 3 with NEW rows and the exact accept
command; --ci turns an arch mismatch into exit 4; a job's code is its worst step's."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.errors import (
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_NO_BASELINE,
    EXIT_PASS,
    EXIT_WRONG_RUNNER,
    worst_exit,
)

RUN = ["--cpu", "--matrix", "smoke", "--filter", "M == 1", "--no-progress",
       "--set", "max_case_seconds=0.2"]


def test_first_run_on_an_arch_without_baselines(tmp_path, capsys):
    out, empty = tmp_path / "results", tmp_path / "no-baselines-here"
    assert main(["bench", *RUN, "--out", str(out), "--baselines", str(empty)]) == EXIT_NO_BASELINE
    text = capsys.readouterr().out
    [run_dir] = list(out.glob("*/cpu"))
    accept = f"harness baseline accept {run_dir} --root {empty} --yes"
    assert accept in text and "rows NEW" in text
    gate = json.loads((run_dir / "smoke.json").read_text())["gate"]
    assert set(gate["verdicts"].values()) == {"NEW"} and gate["has_baseline"] is False
    # the printed command works, and the next run compares and passes
    assert main(accept.split()[1:]) == 0
    assert main(["bench", *RUN, "--out", str(tmp_path / "again"), "--baselines", str(empty)]) == 0


@pytest.mark.slow     # two CPU jobs end to end, ~15 s on 2 cores
def test_the_job_says_no_baseline_per_step(tmp_path, capsys):
    out, empty = tmp_path / "results", tmp_path / "none"
    assert main(["job", "--cpu", "--out", str(out), "--baselines", str(empty),
                 "--no-progress"]) == EXIT_NO_BASELINE
    table = capsys.readouterr().out
    assert table.count("no baseline for this arch") == 2          # gemm and ppl rows
    # where the time went: printed, and in job.json (nothing to confirm: A/B 0 s)
    assert "harness job: time: torch + GPU start " in table
    assert " s, bench (smoke) " in table and ", A/B 0 s, total " in table
    [job] = list(out.glob("*/cpu/job.json"))
    took = json.loads(job.read_text())["seconds"]
    assert list(took) == ["torch + GPU start", "bench (smoke)", "ppl", "A/B", "total"]
    assert took["A/B"] == 0
    assert took["total"] >= sum(v for k, v in took.items() if k != "total") - 0.2 > 0
    # the bench's stages: in brackets on the line, summing to its part in job.json
    stages = json.loads(job.read_text())["bench_stages_s"]
    assert {"data", "set-up", "cpu", "re-check", "gate + other"} <= set(stages)
    assert sum(stages.values()) == pytest.approx(took["bench (smoke)"], abs=0.5)
    assert "[data " in table and "gate + other " in table


@pytest.mark.parametrize("ci", [False, True])
def test_a_job_on_the_wrong_runner(tmp_path, capsys, monkeypatch, ci):
    """This CPU is not sm89: skipped (exit 0) as before, but exit 4 under --ci / $HARNESS_CI."""
    monkeypatch.delenv("HARNESS_CI", raising=False)
    args = ["--arch", "sm89", "--out", str(tmp_path / "r")]
    if ci:
        monkeypatch.setenv("HARNESS_CI", "1")
    want = EXIT_WRONG_RUNNER if ci else EXIT_PASS
    assert main(["bench", "--matrix", "smoke", *args]) == want
    assert main(["job", *args]) == want
    out = capsys.readouterr().out
    assert "expected arch sm89" in out and not (tmp_path / "r").exists()
    if ci:
        assert "nothing was measured on this runner" in out


def test_worst_exit_never_hides_a_regression_behind_a_missing_baseline():
    assert worst_exit([EXIT_PASS, EXIT_NO_BASELINE]) == EXIT_NO_BASELINE
    assert worst_exit([EXIT_NO_BASELINE, EXIT_FAIL]) == EXIT_FAIL
    assert worst_exit([EXIT_FAIL, EXIT_ERROR, EXIT_NO_BASELINE]) == EXIT_ERROR
    assert worst_exit([EXIT_WRONG_RUNNER, EXIT_NO_BASELINE]) == EXIT_WRONG_RUNNER
    assert worst_exit([]) == EXIT_PASS and worst_exit([130]) == EXIT_ERROR


def test_a_steps_code_comes_from_its_gate_not_from_verdict_names():
    """Informational SLOWER rows (CPU, eager, peers) do not fail a step: CI caught a job that
    exited 1 on a CPU run whose gate had passed with 4 SLOWER rows."""
    from harness.commands.job import _code_from_record, _reason

    passed = {"exit_code": 0, "has_baseline": True, "verdicts": {"a": "SLOWER"}, "failing": {}}
    assert _code_from_record(passed) == EXIT_PASS
    assert _reason(EXIT_PASS, passed["failing"], True) == "passed"
    failed = {"exit_code": 1, "has_baseline": True, "failing": {"SLOWER": 2}}
    assert _code_from_record(failed) == EXIT_FAIL
    assert _reason(EXIT_FAIL, failed["failing"], True) == "failing verdicts: 2 SLOWER"
    assert _code_from_record({"exit_code": 0, "has_baseline": False}) == EXIT_NO_BASELINE


def test_the_summary_says_which_rows_of_a_failing_verdict_do_not_gate():
    """a2 of 2026-12-04 printed "558 SAME, 2 SLOWER" beside exit 0: two cold rows."""
    from harness.commands.job import verdict_counts

    assert verdict_counts({"SAME": 558, "SLOWER": 2}, {}) == "558 SAME, 2 SLOWER (2 not gating)"
    assert verdict_counts({"SLOWER": 5, "FASTER": 1}, {"SLOWER": 3}) == \
        "1 FASTER, 5 SLOWER (2 not gating)"
    assert verdict_counts({"SLOWER": 3, "NEW": 4}, {"SLOWER": 3}) == "4 NEW, 3 SLOWER"
    assert verdict_counts({}, {}) == "-"


@pytest.mark.slow     # two CPU jobs end to end, ~13 s on 2 cores
def test_a_cpu_job_with_informational_slower_rows_passes(tmp_path, monkeypatch):
    """End to end: baseline from one CPU job, then a job with a planted slowdown on a path;
    its CPU-mode SLOWER rows are information, so the job passes (exit 0)."""
    from pathlib import Path

    from harness.engines import plugins as plugins_module
    from harness.kernels.base import PATHS

    out, bl = tmp_path / "r", tmp_path / "bl"
    assert main(["job", "--cpu", "--out", str(out), "--baselines", str(bl), "--no-progress",
                 "--steps", "gemm"]) == EXIT_NO_BASELINE
    [first] = list(out.glob("*/cpu"))
    assert main(["baseline", "accept", str(first), "--root", str(bl), "--yes"]) == 0
    plugin = str(Path(__file__).resolve().parents[1] / "planted" / "slowdown_plugin.py")
    monkeypatch.setattr(PATHS, "_paths", dict(PATHS._paths))
    loaded: list[dict] = []
    monkeypatch.setattr(plugins_module, "_PLUGIN_NAMESPACES", loaded)
    monkeypatch.setenv("HARNESS_PLANT_PATH", "native_int4")
    from harness.commands import job as job_command
    asked: list[tuple[str, object]] = []

    class Recorded(job_command.Confirmation):  # the job's A/B runs on a passing matrix too
        def finish(self):
            got = super().finish()
            asked.extend(got.items())
            return got
    monkeypatch.setattr(job_command, "Confirmation", Recorded)
    try:
        code = main(["job", "--cpu", "--out", str(tmp_path / "r2"), "--baselines", str(bl),
                     "--no-progress", "--steps", "gemm", "--plugin", plugin,
                     "--set", "min_effect=0.01"])
    finally:
        for namespace in loaded:
            namespace["_PLANT"].__exit__(None, None, None)
    [run] = list((tmp_path / "r2").glob("*/cpu"))
    gate = json.loads((run / "smoke.json").read_text())["gate"]
    assert "SLOWER" in gate["verdicts"].values()           # the plant shows, as information
    assert gate["exit_code"] == 0 and gate["failing"] == {} and code == EXIT_PASS
    assert asked == [("smoke", None)]    # CPU speed is information: nothing to confirm


def test_the_job_passes_mode_to_the_bench_only(tmp_path, monkeypatch):
    """``harness job --mode graph`` (the planted acceptance: the gating mode only) reaches
    the bench step's command line, not ppl's."""
    from harness.commands import job as job_command

    argvs: list[list[str]] = []
    monkeypatch.setattr(job_command, "_run_step", lambda argv: (argvs.append(argv), (0, ""))[1])
    assert main(["job", "--cpu", "--out", str(tmp_path / "r"), "--mode", "cpu"]) == 0
    bench_argv, ppl_argv = argvs
    assert bench_argv[0] == "bench" and bench_argv[bench_argv.index("--mode") + 1] == "cpu"
    assert ppl_argv[0] == "ppl" and "--mode" not in ppl_argv


def test_the_real_model_step_is_asked_for_by_name_and_gated_as_a_ppl_step(tmp_path,
                                                                          monkeypatch):
    """``--steps ...,smollm2`` adds ``harness ppl --model smollm2`` (not in the default
    steps: it needs the realmodel extra and the model file); it is a perplexity step, so
    never a bench matrix nor an A/B, and the time line names it."""
    from harness.commands import job as job_command

    argvs: list[list[str]] = []
    monkeypatch.setattr(job_command, "_run_step", lambda argv: (argvs.append(argv), (0, ""))[1])
    assert main(["job", "--cpu", "--out", str(tmp_path / "r")]) == 0
    assert [a[0] for a in argvs] == ["bench", "ppl"] and "--model" not in argvs[1]
    argvs.clear()
    assert main(["job", "--cpu", "--out", str(tmp_path / "r"), "--overwrite",
                 "--steps", "gemm,ppl,smollm2"]) == 0
    bench_argv, fixture_argv, real_argv = argvs
    assert bench_argv[bench_argv.index("--matrix") + 1] == "smoke"
    assert "--model" not in fixture_argv
    assert real_argv[:2] == ["ppl", "--cpu"]
    assert real_argv[real_argv.index("--model") + 1] == "smollm2"
    assert "--max-tokens" not in real_argv        # on a CPU: its own 4096-token default
    from harness.reports.job_summary import StepResult, is_ppl, job_timing
    rows = [StepResult("gemm", "smoke", seconds=3.0), StepResult("ppl", "ppl", seconds=1.0),
            StepResult("smollm2", "ppl-smollm2", seconds=40.0)]
    assert [is_ppl(r) for r in rows] == [False, True, True]
    timing = job_timing(rows, {}, 50.0, None)
    assert timing["bench (smoke)"] == 3.0 and timing["ppl (smollm2)"] == 40.0


def test_an_ab_that_cannot_start_is_not_finished_and_the_ppl_step_still_runs(
        tmp_path, monkeypatch, capsys):
    """The job starts its A/B before the ppl step (on another GPU model the factor's
    benches start up meanwhile); when that start fails on an expected error (an unreadable
    stored run), one line says so, the ppl step runs, and the A/B is not finished on what
    it could read."""
    from harness.commands import job as job_command
    from harness.measure.envinfo import git_commit

    argvs: list[list[str]] = []

    def step(argv):
        argvs.append(argv)
        if argv[0] == "bench":                 # the run's folder, as a bench leaves it
            (tmp_path / "r" / git_commit() / "cpu").mkdir(parents=True, exist_ok=True)
        return 0, ""
    calls: list[str] = []

    class CannotStart:
        def __init__(self, *args, **kwargs):
            pass

        def start(self):
            raise ValueError("smoke.csv: not a results file")

        def finish(self):
            calls.append("finish")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append("closed")
    monkeypatch.setattr(job_command, "_run_step", step)
    monkeypatch.setattr(job_command, "Confirmation", CannotStart)
    main(["job", "--cpu", "--out", str(tmp_path / "r"), "--no-progress"])
    out = capsys.readouterr().out
    assert "harness job: A/B not done, the verdicts stand: smoke.csv: not a results file" in out
    assert calls == ["closed"] and [a[0] for a in argvs] == ["bench", "ppl"]
