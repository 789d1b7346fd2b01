"""``harness job``'s A/B confirmation end to end on the CPU: real ``harness bench``
processes of two commits of this project in git worktrees (no fake runner), timed by the
test suite's deterministic fake timer (``tests/planted/fake_timer_plugin.py``, which
declares itself an instrument for both A/B sides). CPU speed is made gating
(``gate_eager_speed=1``) so that the gate and the screen have rows to send to A/B.

* a planted 5% slowdown of fp16_cache (a change of the current side): A/B reads it
  SLOWER on every flagged row, the job exits 1, ``harness report`` agrees;
* the same 5% as a "machine offset" (a plugin that declares ``HARNESS_AB_SIDES = "both"``,
  so both commits are measured slower alike): the gate fails against the stored baseline,
  A/B reads SAME and clears every row, the job exits 0, report agrees.

What this caught before it existed: an A/B of a SwiGLU row failed with "unknown path
'native_int4_fused'" (the bench takes registered path names only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMER = "tests/planted/fake_timer_plugin.py"
SLOW = "tests/planted/slowdown_plugin.py"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _harness(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_COMMIT"}
    env.update(PYTHONPATH=str(repo), HARNESS_PLANT_PATH="fp16_cache")
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A throwaway repository of this checkout's files: the baseline's commit (its CPU
    baseline recorded with the fake timer), then a docs-only commit to measure."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout (the repository is built from its files)")
    repo = tmp_path_factory.mktemp("ab") / "repo"
    files = _git(ROOT, "ls-files", "-co", "--exclude-standard").splitlines()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "the baseline's commit")
    first = _harness(repo, "job", "--cpu", "--steps", "gemm", "--out", "r0", "--baselines",
                     "bl", "--no-progress", "--plugin", TIMER)
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-2000:]   # no baseline
    [run] = list((repo / "r0").glob("*/cpu"))
    accept = _harness(repo, "baseline", "accept", str(run), "--root", "bl", "--yes")
    assert accept.returncode == 0, accept.stderr
    (repo / "docs" / "CHANGE.md").write_text("a later commit\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a docs-only commit")
    return repo


def _job(repo: Path, out: str, *plugins: str) -> tuple[subprocess.CompletedProcess, Path]:
    args = ["job", "--cpu", "--steps", "gemm", "--out", out, "--baselines", "bl",
            "--no-progress", "--set", "gate_eager_speed=1", "--ab-rounds", "2"]
    for p in (TIMER, *plugins):
        args += ["--plugin", p]
    proc = _harness(repo, *args)
    [run] = list((repo / out).glob("*/cpu"))
    return proc, run


def _report(repo: Path, run: Path) -> subprocess.CompletedProcess:
    return _harness(repo, "report", str(run), "--baseline", "bl", "--set", "gate_eager_speed=1",
                    "--out", str(run.parent / "rep"))


@pytest.mark.slow     # ~40 s per case on 2 cores: 2 jobs' benches and 4 A/B benches
def test_a_planted_slowdown_is_confirmed_ab(project):
    proc, run = _job(project, "r1", SLOW)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1, said[-3000:]
    record = json.loads((run / "smoke.json").read_text())["ab_confirm"]
    rows = record["rows"]
    planted = {k: v for k, v in rows.items() if k.split("|")[1] == "fp16_cache"}
    assert planted and all(v["verdict"] == "SLOWER" for v in planted.values()), rows
    assert all(abs(v["change"] - 0.05) < 0.01 for v in planted.values()), planted
    assert all(v["verdict"] != "SLOWER" for k, v in rows.items() if k not in planted)
    # each reading stores the move it had to exceed: at least the gate's min_effect (2%)
    assert all(v["threshold"] >= 0.02 for v in rows.values()), rows
    # the A/B's benches ran pipelined: each was held at the gate plugin (both sides, every
    # round) while the one before it measured, and the planted plugin reached B only
    benches = sorted(run.glob("ab/*/runs/round*/[AB]/*/cpu/smoke.json"))
    assert len(benches) == 4, benches                          # 2 rounds x 2 sides
    judged = {tuple(k.split("|")[:2]) for k in rows}
    for bench in benches:
        plugins = json.loads(bench.read_text())["plugins"]
        assert plugins[0].endswith("bench_data.py") and plugins[1].endswith("bench_gate.py")
        assert any(p.endswith("slowdown_plugin.py") for p in plugins) == (
            bench.parts[-4] == "B"), (bench, plugins)
        # each bench, the baseline commit's too, measured the rows A/B judges and no other
        assert plugins[-1].endswith("bench_rows.py"), plugins
        measured = pd.read_csv(bench.with_suffix(".csv"))
        ok = measured[measured.status == "ok"]
        assert set(zip(ok.case_id, ok.path, strict=True)) == judged, (bench, judged)
        left = measured[measured.status != "ok"]      # here --paths alone selects them
        assert all(str(e).startswith("not among the rows this A/B re-measures")
                   for e in left.error)
    took = json.loads((run / "job.json").read_text())["seconds"]    # the A/B's cost is shown
    assert took["A/B"] > 0 and took["total"] >= took["bench (smoke)"] + took["A/B"] - 0.15
    # the A/B's benches: what they measured and how long the pipeline waited for them
    assert 0 < took["A/B: measuring"] + took["A/B: start-up wait"] <= took["A/B"]
    assert "[measuring " in proc.stdout.split("A/B ", 1)[1]
    assert "harness job: time: torch + GPU start " in proc.stdout
    assert ", bench (smoke) " in proc.stdout
    rep = _report(project, run)
    assert rep.returncode == 1
    assert "verdicts agree with the bench's stored gate on all" in rep.stdout
    # the acceptance table's line for this run (scripts/acceptance_summary.py)
    summary = subprocess.run([sys.executable, str(ROOT / "scripts" / "acceptance_summary.py"),
                              str(run), "--plant", "fp16_cache", "--mode", "cpu"],
                             capture_output=True, text=True, check=True).stdout
    n = len(planted)
    assert f"planted fp16_cache (cpu): {n}/{n} SLOWER (100.0%), 0 other failing" in summary
    assert f"{run} job: exit 1; torch + GPU start " in summary
    assert ", bench (smoke) " in summary and ", A/B " in summary and "[measuring " in summary
    # every row the A/B's benches timed was asked for by their row files
    assert f"{run} A/B benches: " in summary and " 0 of them not in their row" in summary


@pytest.mark.slow
def test_a_machine_offset_is_cleared_ab(project, tmp_path):
    offset = tmp_path / "machine_offset.py"
    offset.write_text(
        '"""This machine reads fp16_cache 5% slower, whatever the commit."""\n'
        "import runpy\n"
        'HARNESS_AB_SIDES = "both"\n'
        f"_KEEP = runpy.run_path({str(project / SLOW)!r})   # the plant lives with it\n")
    proc, run = _job(project, "r2", str(offset))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    meta = json.loads((run / "smoke.json").read_text())
    rows = meta["ab_confirm"]["rows"]
    moved = {k: v for k, v in rows.items() if k.split("|")[1] == "fp16_cache"}
    assert moved and all(v["verdict"] in ("SAME", "FASTER") for v in moved.values()), rows
    assert "cleared" in said and meta["gate"]["exit_code"] == 0
    rep = _report(project, run)
    assert rep.returncode == 0
    assert "verdicts agree with the bench's stored gate on all" in rep.stdout
