"""Filtered re-baselines: ``harness baseline accept|record --only-faster --paths``.

A kernel engineer who made one path faster re-baselines only the rows that got faster:
the FASTER rows replace theirs, keys the old baseline lacks are added, and every other
key (SAME, SLOWER, AMBIGUOUS, MISSING, rows of other paths) keeps the previous
baseline's row exactly, so a slowdown elsewhere is never baselined along with the
speed-up. Synthetic rows: marlin_asym 15% faster, fp16_cache 15% slower, one native_int4
row with one sample 10% slower (AMBIGUOUS), one row dropped, one new case.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from harness.cli import main
from harness.commands.baseline import row_filter
from harness.config import load_settings
from harness.engines.aa_baselines import record
from harness.engines.baseline_accept import accept
from harness.engines.baseline_rows import RowFilter, select_rows
from harness.errors import HarnessError
from harness.reports.gate import evaluate
from harness.reports.stats import with_samples
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import Verdict
from harness.results.baseline import (
    BaselineMeta,
    BaselineNotFoundError,
    load_baseline,
    read_baseline_matrix,
    write_baseline_matrix,
)
from harness.results.environment import Environment, IncompatibleBaselineError
from harness.results.store import RunMeta, load_run, rows_to_csv_text, write_run

S = load_settings("default")
OLD, NEW = "a" * 12, "b" * 12
ENV = Environment(arch="sm90", gpu_name="NVIDIA H200", compute_capability="9.0",
                  torch="2.11.0+cu130", cuda="13.0", driver="580.1", commit=OLD)
BASE = [replace(r, commit=OLD) for r in make_rows(ms=(1, 16, 64), seed=3)]
MARGIN = 0.02                      # the previous baseline's noise margin on every key
INT4 = [r.key for r in BASE if r.path == "native_int4"]
AMBIGUOUS_KEY, DROPPED_KEY = INT4[0], INT4[1]
NEW_CASE = "M8-N2048-K2048-g128-s0"


def _line(row) -> str:
    """The row as the baseline CSV holds it (every column, samples included)."""
    return rows_to_csv_text([row]).splitlines()[1]


def _new_rows(commit: str = NEW, seed: int = 11) -> list:
    rows = resample(BASE, seed, factor={"marlin_asym": 0.85, "fp16_cache": 1.15})
    rows = [replace(r, commit=commit) for r in rows if r.key != DROPPED_KEY]
    rows = [with_samples(r, [r.time_us_median * 1.10]) if r.key == AMBIGUOUS_KEY else r
            for r in rows]
    extra = next(r for r in rows if r.key == INT4[2])
    return rows + [replace(extra, case_id=NEW_CASE)]


def _previous(root, env=ENV, rows=BASE):
    """baselines/sm90/synthetic.* with ``rows`` and a margin on every key."""
    meta = BaselineMeta(matrix="synthetic", arch="sm90", environment=env, rows_sha256="",
                        noise_margins={r.key: MARGIN for r in rows}, source="old source")
    write_baseline_matrix(root / "sm90", rows, meta)


def _run(tmp_path, name="new", rows=None):
    env = replace(ENV, commit=NEW)
    write_run(tmp_path / name, rows or _new_rows(), RunMeta(
        matrix="synthetic", commit=env.commit, arch="sm90", environment=env))
    return tmp_path / name


def _accept(tmp_path, **kw):
    """Accept the new run over ``_previous``; (echoed lines, {key: stored row}, meta)."""
    _previous(tmp_path / "baselines")
    out: list[str] = []
    accept(load_run(_run(tmp_path)), tmp_path / "baselines", S, echo=out.append, **kw)
    rows, meta = read_baseline_matrix(tmp_path / "baselines" / "sm90", "synthetic")
    return out, {r.key: r for r in rows}, meta


def test_the_synthetic_run_has_every_verdict_the_filter_must_tell_apart():
    res = evaluate(_new_rows(), BASE, S, margins={r.key: MARGIN for r in BASE})
    by_verdict = {v: {rv.key for rv in res.of(v)} for v in Verdict}
    assert by_verdict[Verdict.FASTER] == {r.key for r in BASE if r.path == "marlin_asym"}
    assert by_verdict[Verdict.SLOWER] == {r.key for r in BASE if r.path == "fp16_cache"}
    assert by_verdict[Verdict.AMBIGUOUS] == {AMBIGUOUS_KEY}
    assert by_verdict[Verdict.MISSING] == {DROPPED_KEY}
    assert by_verdict[Verdict.NEW] == {(NEW_CASE, "native_int4", "graph")}
    assert len(by_verdict[Verdict.SAME]) == len(BASE) - 6 - 6 - 2


def test_only_faster_replaces_the_faster_rows_and_keeps_the_others_bit_for_bit(tmp_path):
    _, stored, _ = _accept(tmp_path, only_faster=True)
    new = {r.key: r for r in _new_rows()}
    old = {r.key: r for r in BASE}
    assert set(stored) == set(old) | {(NEW_CASE, "native_int4", "graph")}
    for key, row in stored.items():
        if key[1] == "marlin_asym" or key[0] == NEW_CASE:       # FASTER, or NEW: taken
            assert _line(row) == _line(new[key]) and row.commit == NEW
        else:                      # SAME, SLOWER, AMBIGUOUS, MISSING: the old row, exactly
            assert _line(row) == _line(old[key]) and row.commit == OLD
    # the previous baseline's order is kept, the new key last
    assert list(stored)[:len(BASE)] == [r.key for r in BASE]


def test_the_summary_counts_each_verdict_and_lists_the_slowdown_not_baselined(tmp_path):
    out, _, _ = _accept(tmp_path, only_faster=True)
    assert ("synthetic: 6 rows replaced (FASTER 6), 1 added (NEW 1), 24 kept "
            "(SAME 16, SLOWER 6, AMBIGUOUS 1, MISSING 1, other paths 0)") in out
    at = out.index("synthetic: 6 SLOWER row(s) kept at the previous baseline "
                   "(the slowdown is NOT in the new baseline):")
    listed = out[at + 1:at + 7]
    assert sorted(s.split()[:3] for s in listed) == sorted(
        list(r.key) for r in BASE if r.path == "fp16_cache")
    assert all(re.search(r" \+1[45]\.\d\d%$", s) for s in listed)


def test_the_json_says_where_the_rows_came_from_and_keeps_the_margins(tmp_path):
    _, stored, meta = _accept(tmp_path, only_faster=True)
    assert meta.source.startswith("7 rows (FASTER 6, NEW 1) of commit bbbbbbbbbbbb")
    assert meta.source.endswith("; 24 rows kept from old source")
    assert meta.environment.commit == NEW                 # the new run's environment
    assert meta.noise_margins == {k: MARGIN for k in stored if k[0] != NEW_CASE}


def test_paths_alone_replaces_every_row_of_those_paths_and_no_other(tmp_path):
    out, stored, _ = _accept(tmp_path, paths=("fp16_cache",))
    new = {r.key: r for r in _new_rows()}
    old = {r.key: r for r in BASE}
    assert set(stored) == set(old)                 # the new native_int4 case is not added
    for key, row in stored.items():
        want = new[key] if key[1] == "fp16_cache" else old[key]
        assert _line(row) == _line(want)
    # asked for by name: the slower rows are replaced, and the line says so
    assert ("synthetic: 6 rows replaced (SLOWER 6), 0 added, 24 kept (SAME 0, SLOWER 0, "
            "AMBIGUOUS 0, other paths 24), 1 new rows of other paths not added") in out


def test_only_faster_within_paths(tmp_path):
    out, stored, _ = _accept(tmp_path, only_faster=True, paths=("marlin_asym", "native_int4"))
    new = {r.key: r for r in _new_rows()}
    old = {r.key: r for r in BASE}
    for key, row in stored.items():
        taken = key[1] == "marlin_asym" or key[0] == NEW_CASE
        assert _line(row) == _line(new[key] if taken else old[key])
    assert ("synthetic: 6 rows replaced (FASTER 6), 1 added (NEW 1), 24 kept (SAME 4, "
            "SLOWER 0, AMBIGUOUS 1, MISSING 1, other paths 18)") in out
    # fp16_cache's slowdown was kept out because of --paths: still listed
    assert any("6 SLOWER row(s) kept" in s for s in out)


def test_select_rows_without_a_filter_takes_every_new_row():
    new = _new_rows()
    res = evaluate(new, BASE, S)
    chosen = select_rows("synthetic", res, new, BASE, RowFilter())
    assert {r.key for r in chosen.rows} == {r.key for r in BASE} | {r.key for r in new}
    assert chosen.kept == {Verdict.MISSING: 1}              # only the key the run lacks
    assert sum(chosen.replaced.values()) == len(BASE) - 1


@pytest.mark.parametrize("text, want", [
    (None, RowFilter()), ("a, b,,a", RowFilter(paths=("a", "b"))),
])
def test_row_filter_parses_paths(text, want):
    assert row_filter(False, text) == want
    assert row_filter(True, text).active


def test_an_empty_paths_is_refused():
    with pytest.raises(HarnessError, match="--paths: no path named"):
        row_filter(True, " , ")


# ------------------------------------------------------------------ the command line
def _cli(tmp_path, capsys, *extra) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["baseline", "accept", str(_run(tmp_path)), "--root", str(tmp_path / "baselines"),
               "--yes", *extra])
    return rc, capsys.readouterr()


def test_cli_only_faster_prints_the_summary_and_writes(tmp_path, capsys):
    _previous(tmp_path / "baselines")
    rc, out = _cli(tmp_path, capsys, "--only-faster")
    assert rc == 0 and "synthetic: 6 rows replaced (FASTER 6)" in out.out
    meta = json.loads((tmp_path / "baselines" / "sm90" / "synthetic.json").read_text())
    assert "24 rows kept from old source" in meta["source"]


@pytest.mark.parametrize("extra", [("--only-faster",), ("--paths", "marlin_asym")])
def test_cli_without_a_previous_baseline_is_one_line_naming_matrix_and_directory(
        tmp_path, capsys, extra):
    rc, out = _cli(tmp_path, capsys, *extra)
    err = out.err.strip()
    assert rc == 2 and "\n" not in err
    assert "synthetic" in err and str(tmp_path / "baselines" / "sm90") in err
    assert not (tmp_path / "baselines" / "sm90" / "synthetic.csv").exists()


@pytest.mark.parametrize("extra, word", [
    (("--only-faster", "--paths", "marlin_asym,nope"), "nope"),
    (("--paths", ""), "no path named"),
])
def test_cli_bad_paths_are_one_line_and_write_nothing(tmp_path, capsys, extra, word):
    _previous(tmp_path / "baselines")
    before = (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text()
    rc, out = _cli(tmp_path, capsys, *extra)
    err = out.err.strip()
    assert rc == 2 and "\n" not in err and word in err
    assert (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text() == before


def test_an_incomparable_previous_baseline_is_refused_not_replaced(tmp_path):
    _previous(tmp_path / "baselines", env=replace(ENV, gpu_name="NVIDIA H100 80GB HBM3"))
    before = (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text()
    # --reference: into the arch's own folder, whose H100 rows an H200 run cannot judge
    with pytest.raises(IncompatibleBaselineError, match="synthetic: .*--only-faster") as exc:
        accept(load_run(_run(tmp_path)), tmp_path / "baselines", S, echo=lambda s: None,
               only_faster=True, reference=True)
    assert "\n" not in str(exc.value)
    assert (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text() == before
    # by default the H200 run is another model's: its own folder, which holds nothing yet
    with pytest.raises(BaselineNotFoundError, match="models/nvidia-h200 holds none"):
        accept(load_run(_run(tmp_path)), tmp_path / "baselines", S, echo=lambda s: None,
               only_faster=True)
    assert (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text() == before


# ------------------------------------------------------------------------------ record
def _aa_runs(tmp_path, n=3) -> list:
    """``n`` A/A runs of the new commit, one per machine."""
    paths = []
    for i in range(n):
        env = replace(ENV, commit=NEW, host=f"host{i}")
        write_run(tmp_path / f"aa{i}", _new_rows(seed=20 + i), RunMeta(
            matrix="synthetic", commit=NEW, arch="sm90", environment=env))
        paths.append(tmp_path / f"aa{i}")
    return paths


def test_record_only_faster_takes_the_medoid_faster_rows_with_margins_from_all_runs(tmp_path):
    paths = _aa_runs(tmp_path)
    record(paths, tmp_path / "plain", S, echo=lambda s: None)        # what record gives today
    plain, plain_meta = read_baseline_matrix(tmp_path / "plain" / "sm90", "synthetic")
    _previous(tmp_path / "baselines")
    out: list[str] = []
    record(paths, tmp_path / "baselines", S, echo=out.append, only_faster=True)
    rows, meta = read_baseline_matrix(tmp_path / "baselines" / "sm90", "synthetic")
    medoid = {r.key: r for r in plain}
    old = {r.key: r for r in BASE}
    assert {r.key for r in rows} == set(old) | {(NEW_CASE, "native_int4", "graph")}
    for r in rows:
        taken = r.path == "marlin_asym" or r.case_id == NEW_CASE
        assert _line(r) == _line(medoid[r.key] if taken else old[r.key])
    assert any(s.startswith("synthetic: 6 rows replaced (FASTER 6), 1 added (NEW 1), 24 kept")
               for s in out)
    assert any("6 SLOWER row(s) kept" in s for s in out)
    # margins: the A/A runs' for every key they timed (kept rows too), the previous
    # baseline's for the key they lack
    assert {k: v for k, v in meta.noise_margins.items() if k != DROPPED_KEY} == \
        pytest.approx(dict(plain_meta.noise_margins))
    assert meta.noise_margins[DROPPED_KEY] == MARGIN
    assert meta.source.startswith("7 rows (FASTER 6, NEW 1) of 3 A/A runs of bbbbbbbbbbbb")
    assert meta.source.endswith("24 rows kept from old source")
    assert meta.calibration["runs"] == 3


def test_record_filtered_without_a_previous_baseline_is_one_line(tmp_path, capsys):
    paths = [str(p) for p in _aa_runs(tmp_path, 2)]
    capsys.readouterr()
    rc = main(["baseline", "record", "--runs", *paths, "--root", str(tmp_path / "b"),
               "--only-faster"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "synthetic" in err and str(tmp_path / "b") in err
    with pytest.raises(BaselineNotFoundError):
        read_baseline_matrix(tmp_path / "b" / "sm90", "synthetic")


def test_record_paths_unknown_is_one_line(tmp_path, capsys):
    paths = [str(p) for p in _aa_runs(tmp_path, 2)]
    _previous(tmp_path / "baselines")
    capsys.readouterr()
    rc = main(["baseline", "record", "--runs", *paths, "--root", str(tmp_path / "baselines"),
               "--paths", "marlin_asym,nope"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "nope" in err


def test_a_matrix_that_takes_no_row_is_left_byte_for_byte(tmp_path):
    _previous(tmp_path / "baselines")
    folder = tmp_path / "baselines" / "sm90"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    out: list[str] = []
    # fp16_cache only read SLOWER: nothing of it is taken, so nothing may be rewritten
    # (its json would name the new run, the settings and the date of a run it took no row of)
    written = accept(load_run(_run(tmp_path)), tmp_path / "baselines", S, echo=out.append,
                     only_faster=True, paths=("fp16_cache",))
    assert written == []
    assert "synthetic: no row taken; its baseline is left as it was" in out
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_baseline_of_several_commits_names_each_in_its_label(tmp_path):
    _accept(tmp_path, only_faster=True)
    base = load_baseline(tmp_path / "baselines" / "sm90")
    assert base.label == f"baseline {OLD} (24 rows) + {NEW} (7 rows)"
    _previous(tmp_path / "one")                            # every row of one commit
    assert load_baseline(tmp_path / "one" / "sm90").label == f"baseline {OLD}"


def test_only_faster_from_one_run_says_that_one_machine_read_them_faster(tmp_path):
    """One run is one machine: a faster machine reads FASTER on unchanged code (q4 of
    2026-12-06), so taking FASTER rows from one run says so and names the way over
    several machines; a run that took no FASTER row (``--paths`` alone) does not."""
    out, _, _ = _accept(tmp_path, only_faster=True)
    said = [line for line in out if "taken from one run" in line]
    assert said == ["synthetic: 6 FASTER row(s) taken from one run (one GPU): a machine faster "
                    "than the baseline's reads FASTER on unchanged code; to take only what "
                    "every machine reads, use `harness baseline record --only-faster --runs "
                    "R1 R2 ...` over runs of two or more fresh machines"]
    out, _, _ = _accept(tmp_path / "paths", paths=("fp16_cache",))
    assert not any("taken from one run" in line for line in out)
