"""Issue 37, what the CPU can show of the two-minute job that sees 3%: the GPU job measures
graph mode alone (``--cold`` brings the cold rows back) and its gate still calls a missing
graph row MISSING; the extension's build overlaps the case data on a fresh machine, and
the job's time line names both; a 3% slowdown of a path on a machine faster than the
baseline's is sent to A/B whole; the planted slowdown's size is a variable."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.cases import MATRICES
from harness.cases.data_cache import ENV as DATA_CACHE_ENV
from harness.commands import job
from harness.config import load_settings
from harness.kernels import prebuild, registry_load
from harness.kernels.base import PATHS
from harness.measure.warm_start import OverlappedStart
from harness.reports.ab_confirm import screen_keys
from harness.reports.gate import PARTIAL_MODES, evaluate
from harness.reports.gate_record import stored_partial
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import Verdict
from harness.results.store import RunMeta, write_meta

S = load_settings("default")


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"cpu": False, "cold": False, **kw})


def test_the_gpu_job_measures_graph_mode_unless_cold():
    gpu = ("sm90", "NVIDIA H200")
    assert job.gpu_modes(_args(), gpu) == ["--mode", "graph"]
    assert job.gpu_modes(_args(cold=True), gpu) == []
    assert job.gpu_modes(_args(cpu=True), gpu) == []
    assert job.gpu_modes(_args(), None) == []           # the bench's own choice on a CPU


def test_a_run_of_some_modes_sets_other_modes_aside_but_still_misses_a_lost_path():
    base = make_rows(ms=(1, 16), modes=("cold", "graph"), peers=(), seed=3)
    graph = [r for r in base if r.mode == "graph"]
    res = evaluate(graph, base, S, partial=PARTIAL_MODES)
    assert {v.mode for v in res.verdicts} == {"graph"}
    assert not any(v.verdict == Verdict.MISSING for v in res.verdicts)
    lost = [r for r in graph if r.path != "native_int4"]    # a path went missing
    res = evaluate(lost, base, S, partial=PARTIAL_MODES)
    missing = {v.path for v in res.verdicts if v.verdict == Verdict.MISSING}
    assert missing == {"native_int4"} and all(v.mode == "graph" for v in res.verdicts)
    # a filtered run (--paths) sets the lost path aside: that is what True means
    assert not any(v.verdict == Verdict.MISSING
                   for v in evaluate(lost, base, S, partial=True).verdicts)


def _meta(partial):
    return argparse.Namespace(extra={"gate": {"partial": partial}})


def test_the_stored_partial_kind_is_read_back():
    assert stored_partial({"a": _meta(PARTIAL_MODES), "b": _meta(False)}) == PARTIAL_MODES
    assert stored_partial({"a": _meta(PARTIAL_MODES), "b": _meta(True)}) is True
    assert stored_partial({"a": _meta(False)}) is False
    assert stored_partial({"a": argparse.Namespace(extra={})}) is False


class _SlowBuild:
    """A path whose first availability question takes ``seconds`` (a compile)."""

    name = "slow_build"

    def __init__(self, seconds: float) -> None:
        self.seconds, self.asked, self.thread = seconds, 0, None

    def unavailable_reason(self, device):
        self.asked += 1
        self.thread = threading.current_thread().name
        time.sleep(self.seconds)
        return None


def test_the_build_overlaps_the_case_data_on_a_fresh_machine(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_CACHE_ENV, str(tmp_path / "data"))
    cases = MATRICES.cases("smoke", None)[:3]
    path = _SlowBuild(1.5)
    start = OverlappedStart([path], torch.device("cuda"), wait_s=0.2)
    stages = start.finish(cases)
    assert path.asked == 1 and path.thread == "harness-build"
    assert set(stages) == {"build", "data"} and stages["data"] > 0
    assert sum(stages.values()) >= 1.5 - 0.3          # the phase lasted the build
    assert list((tmp_path / "data").rglob("*.npz"))   # the loop will load, not generate


def test_a_cached_build_generates_nothing_ahead(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_CACHE_ENV, str(tmp_path / "data"))
    stages = OverlappedStart([_SlowBuild(0.0)], torch.device("cuda"), wait_s=5.0).finish(
        MATRICES.cases("smoke", None)[:3])
    assert set(stages) == {"build"} and stages["build"] < 5.0
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").rglob("*.npz"))
    assert OverlappedStart([_SlowBuild(0.0)], torch.device("cpu")).finish([]) == {}


def test_the_time_line_names_the_build_first(tmp_path):
    write_meta(tmp_path / "production.json", RunMeta(
        matrix="production", extra={"wall_s_by_stage": {"graph": 30.0, "build": 20.0,
                                                         "data": 12.0, "set-up": 6.0}}))
    results = [job.StepResult("gemm", "production", seconds=70.0)]
    stages = job.bench_stages(results, tmp_path)
    assert list(stages) == ["build", "data", "set-up", "graph", "gate + other"]
    line = job.time_line({"bench (production)": 70.0, "A/B": 0.0, "total": 70.0}, stages)
    assert "[build 20, data 12, set-up 6, graph 30, gate + other 2]" in line


def test_the_time_line_splits_the_job_start_and_the_ab():
    results = [job.StepResult("gemm", "production", seconds=70.0),
               job.StepResult("ppl", "ppl", seconds=6.0)]
    ab = {"A/B": 30.0, "A/B: measuring": 19.6, "A/B: start-up wait": 4.2,
          "machine factor": 50.0, "machine factor: measuring": 40.0,
          "machine factor: start-up wait": 5.0}
    timing = job.job_timing(results, ab, 160.0, 1.5, 4.0)
    assert list(timing) == ["nox start", "torch + GPU start", "bench (production)", "ppl",
                            "machine factor", "machine factor: measuring",
                            "machine factor: start-up wait", "A/B", "A/B: measuring",
                            "A/B: start-up wait", "total"]
    line = job.time_line(timing, {})
    assert line == ("harness job: time: nox start 2 s, torch + GPU start 4 s, bench "
                    "(production) 70 s, ppl 6 s, machine factor 50 s [measuring 40, start-up "
                    "wait 5, other 5], A/B 30 s [measuring 20, start-up wait 4, other 6], "
                    "total 160 s")


def test_a_3pct_path_on_a_faster_machine_is_screened_whole():
    """fp16_cache 3% slower on a machine whose rows read 1.2% faster than the baseline's
    (the worst path offset of three fresh H200s, measurement §9.7): the path's median moves
    +1.8%, inside the 2% row screen for most rows, beyond the 1% path screen for all."""
    base = make_rows(ms=(1, 16, 64, 256), peers=(), seed=11)
    machine = {r.path: 0.988 for r in base}
    cur = resample(base, 12, noise=0.004, factor={**machine, "fp16_cache": 0.988 * 1.03})
    keys = screen_keys(cur, base, S)
    fp16 = {r.key for r in base if r.path == "fp16_cache" and r.status == "ok"}
    assert fp16 <= keys
    row_only = screen_keys(cur, base, replace(S, ab_path_screen=0.5))
    assert len(row_only & fp16) < len(fp16)           # what the row screen alone would miss
    unchanged = resample(base, 13, noise=0.004, factor=machine)
    assert not screen_keys(unchanged, base, S)


@pytest.mark.parametrize("fraction, expected", [("", 0.05), ("0.03", 0.03)])
def test_the_planted_slowdown_takes_its_size_from_the_environment(monkeypatch, fraction,
                                                                  expected):
    registry_load.load_all()
    monkeypatch.setenv("HARNESS_PLANT_FRACTION", fraction)
    monkeypatch.setenv("HARNESS_PLANT_PATH", "fp16_cache")
    plugin = Path(__file__).resolve().parents[1] / "planted" / "slowdown_plugin.py"
    spec = importlib.util.spec_from_file_location(f"_plant_{fraction or 'default'}", plugin)
    module = importlib.util.module_from_spec(spec)
    before = PATHS.get("fp16_cache")
    try:
        spec.loader.exec_module(module)
        assert module._WRAPPER.fraction == pytest.approx(expected)
    finally:
        module._PLANT.__exit__(None, None, None)
        sys.modules.pop(spec.name, None)
    assert PATHS.get("fp16_cache") is before


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_baseline_commits_build_in_the_background_in_their_own_worktrees(tmp_path,
                                                                             monkeypatch):
    """A repository whose ``harness build`` records where and how it ran: each baseline
    commit other than HEAD is built once, in a worktree of that commit, removed after;
    an unknown commit is skipped."""
    repo = tmp_path / "repo"
    (repo / "harness").mkdir(parents=True)
    main = repo / "harness" / "__main__.py"
    record = tmp_path / "built.txt"
    script = ("import pathlib, sys\n"
              f"p = pathlib.Path({str(record)!r})\n"
              "tag = (pathlib.Path(__file__).parent / 'tag').read_text().strip()\n"
              "p.write_text((p.read_text() if p.exists() else '') + tag + ' ' + "
              "' '.join(sys.argv[1:]) + '\\n')\n")
    main.write_text(script)
    (repo / "harness" / "__init__.py").write_text("")
    _git(tmp_path, "init", "-q", str(repo))
    shas = []
    for tag in ("base1", "base2", "head"):
        (repo / "harness" / "tag").write_text(tag)
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", tag)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pre = prebuild.start(repo, [shas[0], shas[1], shas[0], shas[2], "f" * 40], "sm90",
                         tmp_path / "work")
    assert pre.shas == (shas[0], shas[1])               # HEAD and the unknown one left out
    assert pre.wait() >= 0.0
    assert record.read_text().splitlines() == ["base1 build --arch sm90",
                                               "base2 build --arch sm90"]
    assert all("exit 0" in line for line in pre.lines) and len(pre.lines) == 2
    assert not list((tmp_path / "work").glob("*/harness"))   # the worktrees are gone
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    assert prebuild.start(repo, [shas[2]], "sm90", tmp_path / "w2").wait() == 0.0
