"""Margins that must hold on a new machine: the moderated log-spread model, the medoid
baseline rows, ``baseline record`` and the leave-one-machine-out check."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import t as student_t

from harness.config import load_settings
from harness.reports.calibration import (
    leave_one_machine_out,
    machine_label,
    medoid_rows,
    spreads,
)
from harness.reports.synthetic import make_rows, resample
from harness.results.environment import Environment
from harness.results.store import RunMeta, write_run

S = load_settings("default")
K1, K2 = ("c1", "p", "graph"), ("c2", "p", "graph")


def test_margin_is_the_prediction_bound_of_the_log_medians():
    meds = [100.0, 101.0, 99.0, 100.5]
    m = spreads([{K1: v} for v in meds], ["a", "b", "c", "d"], coverage=0.999, prior_df=0.0)[K1]
    x = np.log(meds)
    want = math.expm1(student_t.ppf(0.999, 3) * np.std(x, ddof=1) * math.sqrt(1 + 1 / 4))
    assert m.margin == pytest.approx(want, rel=1e-9)
    assert m.runs == 4 and m.machines == 4
    assert m.center_us == pytest.approx(math.exp(np.median(x)))


def test_floor_and_moderation_towards_the_class():
    # K2's four runs agree by chance; its class (same path, mode, time band) is noisy:
    # moderation gives it a margin near the class's, not ~0
    rng = np.random.default_rng(1)
    runs = []
    for _ in range(4):
        run = {K2: 50.0}
        for j in range(12):
            run[(f"n{j}", "p", "graph")] = 50.0 * math.exp(rng.normal(0, 0.01))
        runs.append(run)
    out = spreads(runs, list("abcd"), coverage=0.999, prior_df=6.0, floor=0.01)
    lucky = out[K2]
    assert lucky.sd_log == 0.0 and lucky.sd_moderated > 0.005
    assert lucky.margin > 0.02
    alone = spreads(runs, list("abcd"), coverage=0.999, prior_df=0.0, floor=0.01)[K2]
    assert alone.margin == 0.01                  # no moderation: only the floor is left


def test_a_key_in_one_run_gets_no_margin_and_bad_input_is_refused():
    assert spreads([{K1: 1.0}, {K2: 1.0}], ["a", "b"]) == {}
    with pytest.raises(ValueError, match="coverage"):
        spreads([{K1: 1.0}, {K1: 1.0}], ["a", "b"], coverage=1.2)
    with pytest.raises(ValueError, match="one machine label per run"):
        spreads([{K1: 1.0}], ["a", "b"])


def test_medoid_rows_take_the_middle_run_not_an_outlier():
    base = make_rows(ms=(16,), paths=("fp16_cache",), peers=())
    runs = [resample(base, s, factor={"fp16_cache": f})
            for s, f in ((1, 0.90), (2, 1.0), (3, 1.01))]
    rows, source = medoid_rows(runs)
    assert set(source.values()) == {1}           # nearest the median of 0.90, 1.00, 1.01
    assert [r.time_us_median for r in rows] == [r.time_us_median for r in runs[1]]


def _ids(uuid: str, boot: str = "") -> dict:
    """Environment keyword arguments for a GPU uuid and boot id, whether they are fields or
    extra keys of ``Environment``."""
    env = Environment.from_dict({"gpu_uuid": uuid, "boot_id": boot})
    return {k: getattr(env, k) for k in ("gpu_uuid", "boot_id") if hasattr(env, k)} or \
        {"extra": {"gpu_uuid": uuid, "boot_id": boot}}


def test_machine_label_prefers_the_boot_id():
    env = replace(Environment.from_dict({"gpu_uuid": "GPU-1", "boot_id": "b-7"}), host="h")
    assert machine_label(env) == "boot:b-7"
    no_boot = replace(Environment.from_dict({"gpu_uuid": "GPU-1"}), host="h")
    assert machine_label(no_boot) == "h/GPU-1"
    assert machine_label(Environment()) == ""


def _fleet(machines: int, per_machine: int, offset_sd: float, seed: int):
    """Runs with a per-(row, machine) offset of ``offset_sd`` (log) and 0.3% sample noise."""
    base = make_rows(ms=(1, 16, 64, 256), paths=("fp16_cache", "marlin_asym", "native_int4"),
                     peers=())
    rng = np.random.default_rng(seed)
    runs, labels = [], []
    for m in range(machines):
        offsets = {r.key: math.exp(rng.normal(0, offset_sd)) for r in base}
        for p in range(per_machine):
            runs.append(resample(base, seed * 100 + m * 10 + p, noise=0.003, factor=offsets))
            labels.append(f"m{m}")
    return runs, labels


def test_leave_one_machine_out_holds_and_catches_a_planted_slowdown():
    runs, labels = _fleet(machines=4, per_machine=2, offset_sd=0.004, seed=3)
    held = leave_one_machine_out(runs, labels, S, planted=0.05)
    assert len(held) == 8 and all(h.train_machines == 3 for h in held)
    assert sum(h.false_slower for h in held) == 0
    for h in held:
        for caught, affected, others in h.planted.values():
            assert affected > 0 and caught >= 0.95 * affected and others == 0


def test_margins_from_one_machine_do_not_cover_another():
    """The failure this model exists for: one machine's processes agree with each other,
    a new machine's offsets fall outside; the held-out check shows it."""
    runs, labels = _fleet(machines=3, per_machine=3, offset_sd=0.03, seed=5)
    held = leave_one_machine_out(runs, labels, S, planted=0.05)
    narrow = leave_one_machine_out(runs, labels, S, coverage=0.6, prior_df=0.0, planted=0.05)
    assert sum(h.false_slower for h in narrow) > sum(h.false_slower for h in held)


def test_record_names_runs_by_commit_gpu_and_date(tmp_path, capsys):
    from harness.cli import main
    from harness.results.baseline import load_baseline

    runs, labels = _fleet(machines=3, per_machine=2, offset_sd=0.004, seed=7)
    paths = []
    for i, (rows, label) in enumerate(zip(runs, labels, strict=True)):
        env = Environment(arch="sm90", gpu_name="synthetic H200", torch="2.11.0", cuda="13.0",
                          commit="a" * 40, host="gpu-host", date="2026-12-03T08:00:00+00:00",
                          **_ids(f"GPU-{label}", f"boot-{label}"))
        write_run(tmp_path / f"aa{i}", rows, RunMeta(matrix="synthetic", environment=env))
        paths.append(str(tmp_path / f"aa{i}"))
    bl = tmp_path / "baselines"
    assert main(["baseline", "record", "--runs", *paths, "--root", str(bl)]) == 0
    out = capsys.readouterr().out
    assert "from 6 runs on 3 machine(s)" in out
    meta = json.loads((bl / "sm90" / "synthetic.json").read_text())
    text = json.dumps(meta)
    assert str(tmp_path) not in text                       # no local path anywhere
    srcs = meta["calibration"]["sources"]
    assert len(srcs) == 6 and {s["gpu_uuid"] for s in srcs} == {"GPU-m0", "GPU-m1", "GPU-m2"}
    assert all(s["commit"] == "a" * 40 and s["date"] for s in srcs)
    base = load_baseline(bl / "sm90")
    assert len(base.margins) == len([r for r in runs[0] if r.status == "ok"])
    assert main(["baseline", "lomo", "--runs", *paths]) == 0
    assert "held out" in capsys.readouterr().out
    assert main(["baseline", "lomo", "--runs", *paths, "--ab-screen"]) == 0
    assert "A/B screen 2.0%" in capsys.readouterr().out
    # a matrix without rows in the gating modes is said once, and nothing checked fails
    assert main(["baseline", "lomo", "--runs", *paths, "--modes", "cold"]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == [
        "synthetic: no rows in modes cold (its modes: graph); not checked"]


def test_record_refuses_runs_of_two_commits(tmp_path, capsys):
    from harness.cli import main

    rows = make_rows(ms=(1,), peers=())
    for i, commit in enumerate(("a" * 40, "b" * 40)):
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=commit)
        write_run(tmp_path / f"r{i}", replace_commit(rows, commit),
                  RunMeta(matrix="synthetic", environment=env))
    assert main(["baseline", "record", "--runs", str(tmp_path / "r0"), str(tmp_path / "r1"),
                 "--root", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "one commit" in err and "\n" not in err


def _code_repo(where):
    """A git repository with the measured folders; commits: base, docs only, kernel."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(where), *args], check=True,
                              capture_output=True, text=True).stdout.strip()
    where.mkdir()
    git("init", "-q")
    git("config", "user.email", "t@t")
    git("config", "user.name", "t")
    for folder in ("kernels", "measure", "cases", "model"):
        (where / "harness" / folder).mkdir(parents=True)
        (where / "harness" / folder / "code.py").write_text(f"# {folder}\n")
    shas = []
    for name, path in (("base", "README.md"), ("docs", "README.md"),
                       ("kernel", "harness/kernels/code.py")):
        target = where / path
        target.write_text(target.read_text() + name + "\n" if target.exists() else name)
        git("add", ".")
        git("commit", "-qm", name, "--date", f"2026-12-0{len(shas) + 1}T00:00:00")
        shas.append(git("rev-parse", "HEAD"))
    return shas


def test_record_takes_runs_of_commits_with_the_same_measured_code(tmp_path, capsys,
                                                                 monkeypatch):
    """--same-code: runs of two commits that differ outside harness/kernels, measure, cases
    and model make one baseline named by the newer commit, its sources each run's own; a
    commit that changed the measured code is refused in one line naming the folder."""
    from harness.cli import main

    base, docs, kernel = _code_repo(tmp_path / "repo")
    monkeypatch.chdir(tmp_path / "repo")
    runs, labels = _fleet(machines=3, per_machine=1, offset_sd=0.004, seed=3)
    paths = []
    for i, (rows, label) in enumerate(zip(runs, labels, strict=True)):
        commit = (base, docs, kernel)[i]
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=commit[:12],
                          date="2026-12-03T08:00:00+00:00",
                          **_ids(f"GPU-{label}", f"boot-{label}"))
        write_run(tmp_path / f"aa{i}", replace_commit(rows, commit[:12]),
                  RunMeta(matrix="synthetic", environment=env))
        paths.append(str(tmp_path / f"aa{i}"))
    bl = tmp_path / "baselines"
    assert main(["baseline", "record", "--runs", *paths[:2], "--root", str(bl)]) == 2
    assert "--same-code" in capsys.readouterr().err
    assert main(["baseline", "record", "--runs", *paths[:2], "--root", str(bl),
                 "--same-code"]) == 0
    assert f"the baseline names {docs[:12]}" in capsys.readouterr().out
    meta = json.loads((bl / "sm90" / "synthetic.json").read_text())
    assert meta["environment"]["commit"] == docs[:12]
    assert {s["commit"] for s in meta["calibration"]["sources"]} == {base[:12], docs[:12]}
    with open(bl / "sm90" / "synthetic.csv") as fh:
        assert {row["commit"] for row in csv.DictReader(fh)} == {docs[:12]}
    assert main(["baseline", "record", "--runs", *paths, "--root", str(bl),
                 "--same-code"]) == 2
    err = capsys.readouterr().err.strip()
    assert "differ in harness/kernels" in err and "\n" not in err


def replace_commit(rows, commit):
    return [replace(r, commit=commit) for r in rows]


def test_record_takes_each_matrix_from_the_runs_that_hold_it(tmp_path, capsys):
    """A job's run directories (one matrix here) beside a separate run of another matrix
    on one machine only: each matrix is recorded from its own runs; one run gives rows
    without margins (and a json without NaN), never an error."""
    from harness.cli import main
    from harness.results.baseline import load_baseline

    runs, labels = _fleet(machines=3, per_machine=1, offset_sd=0.004, seed=3)
    paths = []
    for i, (rows, label) in enumerate(zip(runs, labels, strict=True)):
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit="c" * 40,
                          date="2026-12-03T08:00:00+00:00",
                          **_ids(f"GPU-{label}", f"boot-{label}"))
        write_run(tmp_path / f"aa{i}", rows, RunMeta(matrix="synthetic", environment=env))
        paths.append(str(tmp_path / f"aa{i}"))
    other = [replace(r, matrix="other") for r in runs[0]]
    env = Environment(arch="sm90", gpu_name="synthetic H200", commit="c" * 40,
                      **_ids("GPU-m0", "boot-m0"))
    write_run(tmp_path / "solo", other, RunMeta(matrix="other", environment=env))
    bl = tmp_path / "baselines"
    assert main(["baseline", "record", "--runs", *paths, str(tmp_path / "solo"),
                 "--root", str(bl)]) == 0
    out = capsys.readouterr().out
    assert "synthetic: " in out and "from 3 runs on 3 machine(s)" in out
    assert "other: no key timed in two runs" in out
    meta = json.loads((bl / "sm90" / "other.json").read_text())
    assert meta["calibration"]["runs"] == 1 and meta["calibration"]["margin_max"] is None
    assert load_baseline(bl / "sm90").margins                 # synthetic's margins are there


def test_record_refuses_runs_whose_matrix_was_measured_with_other_dispatcher_switches(
        tmp_path, capsys):
    """Each matrix is checked against its own recorded environment: one run of nox (the
    dispatcher switches set) and one plain run (unset) are not one A/A pair."""
    from harness.cli import main

    rows = make_rows(ms=(1,), peers=())
    for i, switch in enumerate(("1", "")):
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit="d" * 40,
                          **_ids(f"GPU-{i}", f"boot-{i}"),
                          extra={"tinyloop_use_marlin": switch})
        write_run(tmp_path / f"r{i}", rows, RunMeta(matrix="synthetic", environment=env))
    assert main(["baseline", "record", "--runs", str(tmp_path / "r0"), str(tmp_path / "r1"),
                 "--root", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "dispatcher switch TINYLOOP_USE_MARLIN differs" in err and "\n" not in err


def test_the_ab_screen_catches_a_planted_path_where_wide_margins_cannot():
    """Per-(row, machine) offsets of 2% (what fp16_cache's ~10 us rows showed between
    H200s): margins that hold them miss a planted 5% on many rows; the job's A/B screen
    (rows beyond 2%, and every row of a path whose median moved) sends every planted row
    to A/B and only a few unchanged ones. The path screen at 2% here: with 8 rows per path
    at a 2% per-row sd a path's median itself moves ~1% by chance (real H200s: 56 rows per
    path at ~1.3%, path medians -1.2%..+0.1%, measured in docs/measurement.md §9.7)."""
    runs, labels = _fleet(machines=4, per_machine=1, offset_sd=0.02, seed=7)
    held = leave_one_machine_out(runs, labels, replace(S, ab_path_screen=0.02), planted=0.05,
                                 screen=0.02)
    missed = sum(a - c for h in held for c, a, _ in h.planted.values())
    assert missed > 0                              # the cross-machine gate alone
    for h in held:
        for path, (_, affected, _) in h.planted.items():
            assert h.planted_screened[path] == affected
        assert h.screened < 0.25 * h.gated


def test_sources_name_each_matrix_by_the_process_that_measured_it(tmp_path):
    """One run directory holding the job's matrix and a later bench's matrix (the device
    calibration's layout): each baseline's sources carry that matrix's own date."""
    from harness.cli import main

    runs, labels = _fleet(machines=3, per_machine=1, offset_sd=0.004, seed=4)
    paths = []
    for i, (rows, label) in enumerate(zip(runs, labels, strict=True)):
        for matrix, hour in (("synthetic", "08"), ("other", "09")):
            env = Environment(arch="sm90", gpu_name="synthetic H200", commit="c" * 40,
                              date=f"2026-12-03T{hour}:0{i}:00+00:00",
                              **_ids(f"GPU-{label}", f"boot-{label}"))
            write_run(tmp_path / f"aa{i}", [replace(r, matrix=matrix) for r in rows],
                      RunMeta(matrix=matrix, environment=env))
        paths.append(str(tmp_path / f"aa{i}"))
    bl = tmp_path / "baselines"
    assert main(["baseline", "record", "--runs", *paths, "--root", str(bl)]) == 0
    for matrix, hour in (("synthetic", "08"), ("other", "09")):
        srcs = json.loads((bl / "sm90" / f"{matrix}.json").read_text())["calibration"]["sources"]
        assert [s["date"] for s in srcs] == [f"2026-12-03T{hour}:0{i}:00+00:00" for i in range(3)]
