"""``harness history``: stored runs found per commit, placed on the first-parent line,
gaps with their reasons (never zeros), steps found by ruptures and judged by the gate,
the page and the steps CSV, and the command on a real git repository."""

from __future__ import annotations

import math
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.config import load_settings
from harness.reports.history import NO_RUN, build_history, group_ratios
from harness.reports.history_html import render_history_html, write_history
from harness.reports.steps import (
    STEP_COLUMNS,
    RowStep,
    change_points,
    detect_steps,
    noise_sigma,
    steps_frame,
    time_steps,
)
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import Verdict
from harness.results.catalog import archs, stored_runs
from harness.results.environment import Environment
from harness.results.store import RunMeta, write_run

S = load_settings()
SHAS = [f"{i:x}" * 40 for i in range(1, 9)]
LINE = [(sha, f"commit {i}") for i, sha in enumerate(SHAS)]
BASE = make_rows(ms=(1, 16, 64), seed=1, paths=("fp16_cache", "marlin_asym"), peers=())


def _store(root: Path, sha: str, rows, label: str = "sm90", extra=None, dirty=False):
    name = sha[:12] + ("-dirty" if dirty else "")
    env = Environment(arch="sm90", gpu_name="synthetic H200", commit=name)
    write_run(root / name / label, rows, RunMeta(matrix="synthetic", commit=name, arch="sm90",
                                                 environment=env, extra=extra or {}))


@pytest.fixture()
def results(tmp_path):
    """8 commits: a 5% fp16_cache slowdown from commit 5, commit 2 not measured, commit 3
    filtered (M != 1), commit 4 less accurate on marlin_asym, an error and rows missing
    (an interrupted run) at commit 6, two
    runs at commit 7 (a --repeat), a run of a commit off the line, a broken run."""
    root = tmp_path / "results"
    for i, sha in enumerate(SHAS):
        if i == 2:
            continue
        rows = resample(BASE, seed=100 + i, factor={"fp16_cache": 1.05 if i >= 5 else 1.0})
        if i == 3:
            rows = [r for r in rows if r.M != 1]
        if i == 4:
            rows = [replace(r, rel_err=r.rel_err * 1.3) if r.path == "marlin_asym" else r
                    for r in rows]
        if i == 6:
            rows = [replace(r, status="error", error="CUDA out of memory", time_us_median=math.nan)
                    if (r.M, r.path) == (64, "fp16_cache") else r for r in rows
                    if (r.M, r.path) != (16, "marlin_asym")]          # and an interrupted run
        _store(root, sha, rows, extra={"filter": "M != 1"} if i == 3 else None)
        if i == 7:
            _store(root, sha, resample(rows, 999, factor={"fp16_cache": 1.05}), "sm90.rep2")
    _store(root, "f" * 40, BASE)                                  # not on the line
    _store(root, "e" * 40, BASE)                                  # then cut short: unreadable
    with open(root / ("e" * 12) / "sm90" / "synthetic.csv", "a") as fh:
        fh.write("synthetic,M1,fp16_cache\n")
    (root / "compare" / "x" / "sm90").mkdir(parents=True)         # not a commit directory
    return root


def test_stored_runs_by_commit_directory(results):
    assert archs(results) == ["sm90"]
    runs = stored_runs(results, "sm90")
    assert [r.label for r in runs if r.commit == SHAS[7][:12]] == ["sm90", "sm90.rep2"]
    broken = [r for r in runs if r.commit == "e" * 12]
    assert broken[0].run is None and "field 'mode' is missing" in broken[0].problem
    assert stored_runs(results, "sm80") == []


def test_history_places_runs_and_names_every_gap(results):
    h = build_history(LINE, stored_runs(results, "sm90"), arch="sm90", floor=0.01)
    assert len(h.slots) == 8 and [len(s.runs) for s in h.slots] == [1, 1, 0, 1, 1, 1, 1, 2]
    assert {r.commit for r in h.off_line} == {"f" * 12, "e" * 12}
    s = next(x for x in h.series if x.path == "fp16_cache" and x.case_id.startswith("M1-"))
    gaps = {p.index: p.gap for p in s.points if p.gap}
    assert gaps[2] == NO_RUN
    assert gaps[3] == "not measured in this run (filter 'M != 1')"
    err = next(x for x in h.series if x.path == "fp16_cache" and x.case_id.startswith("M64-"))
    assert [p.gap for p in err.points if p.index == 6] == ["error: CUDA out of memory"]
    cut = next(x for x in h.series if x.path == "marlin_asym" and x.case_id.startswith("M16-"))
    assert [p.gap for p in cut.points if p.index == 6] == [
        "absent from this run (its other rows are there: an interrupted or partial run)"]
    # gaps are values of nothing, never zeros; commit 7 shows both of its runs
    assert all(math.isnan(p.value("time_us")) for p in s.points if p.gap)
    assert [p.run for p in s.points if p.index == 7] == ["sm90", "sm90.rep2"]
    agg = group_ratios(h.groups()[("synthetic", "fp16_cache", "graph")], "time_us")
    at = {(g.index, g.run): g for g in agg}
    assert math.isnan(at[(2, "")].ratio) and at[(2, "")].rows == 0
    assert at[(3, "sm90")].rows == 4 and at[(6, "sm90")].rows == 4       # of 6 rows each
    assert at[(7, "sm90.rep2")].ratio == pytest.approx(1.05, abs=0.01)


def test_steps_at_the_planted_commits_and_nowhere_else(results):
    h = build_history(LINE, stored_runs(results, "sm90"), arch="sm90", floor=0.01)
    steps = detect_steps(h, S)
    found = {(st.kind, st.path, st.index, st.verdict) for st in steps}
    assert ("time", "fp16_cache", 5, Verdict.SLOWER) in found
    assert ("accuracy", "marlin_asym", 4, Verdict.LESS_ACCURATE) in found
    assert not [st for st in steps if st.kind == "time" and st.path == "marlin_asym"]
    slower = next(st for st in steps if st.kind == "time")
    assert len(slower.rows) == slower.of == 6 and slower.size == pytest.approx(0.05, abs=0.01)
    frame = steps_frame(steps, h)
    assert list(frame.columns) == list(STEP_COLUMNS) and len(frame) == len(steps)
    assert frame.loc[frame.kind == "time", "commit"].tolist() == [SHAS[5]]


def _series(values, margin=0.01):
    rows = make_rows(ms=(16,), shapes=((2048, 2048, 128),), paths=("fp16_cache",), peers=())
    r0 = rows[0]
    runs = [[replace(r0, time_us_median=v, samples_us="", n_samples=0)] for v in values]
    from harness.reports.history import Point, RowSeries
    points = tuple(Point(i, "sm90", run[0]) for i, run in enumerate(runs))
    return RowSeries(r0.matrix, r0.case_id, r0.path, r0.mode, margin, points)


@pytest.mark.parametrize("seed", range(20))
def test_noise_within_the_band_is_not_a_step(seed):
    rng = np.random.default_rng(seed)
    values = 100 * np.exp(rng.normal(0, 0.01 / 2.77, 30))          # the band's own noise
    assert time_steps(_series(values), S) == []


def test_penalty_false_alarms_and_power_on_the_bands_own_noise():
    """PELT with the noise-derived penalty alone (before the threshold): on series of the
    band's noise it rarely cuts; a step of 5.5 sigma (2% at a 1% margin) it finds."""
    for n in (10, 30):
        alarms = found = 0
        for seed in range(200):
            x = np.random.default_rng(seed).normal(0, 0.01 / 2.77, n)
            alarms += bool(change_points(x, noise_sigma(x, 0.01)))
            x[n // 2:] += 0.02
            found += n // 2 in change_points(x, noise_sigma(x, 0.01))
        assert alarms / 200 <= 0.05 and found / 200 >= 0.97


def test_a_step_beyond_the_threshold_is_found_and_a_small_one_is_not():
    rng = np.random.default_rng(7)
    noise = np.exp(rng.normal(0, 0.003, 20))
    big = time_steps(_series(100 * noise * np.r_[np.ones(12), 1.06 * np.ones(8)]), S)
    assert [(s.index, round(s.size, 2)) for s in big] == [(12, 0.06)]
    assert big[0].verdict == Verdict.AMBIGUOUS          # no samples stored: no test possible
    assert time_steps(_series(100 * noise * np.r_[np.ones(12), 1.02 * np.ones(8)]), S) == []
    back = time_steps(_series(100 * noise * np.r_[np.ones(12), 0.9 * np.ones(8)]), S)
    assert back[0].size == pytest.approx(-0.1, abs=0.01)


def test_a_series_noisier_than_its_margin_is_not_cut_into_noise():
    rng = np.random.default_rng(3)
    x = np.log(100 * np.exp(rng.normal(0, 0.03, 40)))    # 3% noise, margin 1%
    assert noise_sigma(x, 0.01) > 0.02
    assert time_steps(_series(np.exp(x), margin=0.01), S) == []
    assert change_points([0.0, 0.0, 0.1, 0.1], 0.0) == []             # no noise figure: nothing


def test_page_and_csv(results, tmp_path):
    h = build_history(LINE, stored_runs(results, "sm90"), arch="sm90", floor=0.01)
    steps = detect_steps(h, S)
    files = write_history(h, steps, S, tmp_path / "out", notes=("a note",))
    page = files.html.read_text()
    assert "<script" not in page and " src=" not in page and 'href="http' not in page
    assert page.count("<svg") == 2 and 'id="steps-table"' in page and "a note" in page
    assert "no stored run of this commit" in page and "error: CUDA out of memory" in page
    assert "not measured in this run (filter &#x27;M != 1&#x27;)" in page
    assert "sm90, sm90.rep2" in page and "f" * 12 in page
    csv = pd.read_csv(files.steps_csv)
    assert set(csv.verdict) == {"SLOWER", "LESS_ACCURATE"}
    empty = render_history_html(h, [], S, title="t")
    assert 'id="no-steps"' in empty


def test_row_step_record_is_frozen():
    rs = RowStep("time", ("m", "c", "p", "graph"), 1, 1.0, 1.1, 0.1, 0.03, Verdict.SLOWER, "r")
    with pytest.raises(AttributeError):
        rs.size = 0.2   # type: ignore[misc]


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_history_command_on_a_git_repository(tmp_path, capsys):
    from harness.cli import main

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    shas = []
    for i in range(6):
        (repo / "f.txt").write_text(f"{i}\n")
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", f"change {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    root = tmp_path / "results"
    for i, sha in enumerate(shas[1:], start=1):                   # the first commit: no run
        _store(root, sha, resample(BASE, seed=i, factor={"marlin_asym": 1.08 if i >= 4 else 1}))
    code = main(["history", "--results", str(root), "--repo", str(repo),
                 "--baselines", str(tmp_path / "none"), "--out", str(tmp_path / "h")])
    out = capsys.readouterr().out
    assert code == 0
    assert "5 commits (5 stored runs" in out and "1 older commits" not in out
    assert f"{shas[4][:10]} #3   time     SLOWER" in out and "change 4" in out
    assert (tmp_path / "h" / "history.html").is_file()
    assert (tmp_path / "h" / "history-steps.csv").read_text().count(shas[4]) == 1
    assert main(["history", "--results", str(tmp_path / "empty"), "--repo", str(repo)]) == 2
    assert "no stored run" in capsys.readouterr().err


def test_runs_of_two_gpu_models_are_never_drawn_on_one_axis(tmp_path):
    """A pool of H200 and H100 runners stores runs of both models under sm90: the history
    draws one model (by default the one with the most runs, or --model) and names the
    others it left out."""
    from harness.reports.history import one_model

    root = tmp_path / "results"
    for i, sha in enumerate(SHAS[:4]):
        _store(root, sha, resample(BASE, seed=i))
    h100 = Environment(arch="sm90", gpu_name="synthetic H100", commit=SHAS[4][:12])
    write_run(root / SHAS[4][:12] / "sm90", resample(BASE, seed=9, factor={"fp16_cache": 1.3}),
              RunMeta(matrix="synthetic", commit=SHAS[4][:12], arch="sm90", environment=h100))
    runs = stored_runs(root, "sm90")
    model, kept, others = one_model(runs)
    assert model == "synthetic H200" and len(kept) == 4 and others == {"synthetic H100": 1}
    model, kept, others = one_model(runs, "synthetic-h100")
    assert model == "synthetic H100" and len(kept) == 1 and others == {"synthetic H200": 4}
    with pytest.raises(ValueError, match="no stored run of that GPU model"):
        one_model(runs, "L4")
    history = build_history(LINE, one_model(runs)[1], arch="sm90", margins={}, floor=0.01)
    assert {r.run.environment.gpu_name for s in history.slots for r in s.runs} == \
           {"synthetic H200"}
