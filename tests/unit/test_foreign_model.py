"""Speed verdicts on every GPU model of an arch (docs/measurement.md §16).

A baseline recorded on one model ("synthetic H200") judged on another ("synthetic H100")
that differs per class of rows (memory-bound rows x1.35, the scalar kernel x1.02, ...) and
per row (a few percent either way, as cuBLAS picks other kernels): the machine factor is
measured here on the baseline's commit, the run is screened against the projection and
the rows that moved are measured A/B. A model with a baseline of its own is gated against
it. The benches are fake runners in a real git repository."""

from __future__ import annotations

import subprocess
import zlib
from dataclasses import replace

import pytest

from harness.cli import main
from harness.commands.common import gate_against_baseline
from harness.config import load_settings
from harness.engines.ab_pending import reading_of
from harness.engines.ab_step import Confirmation, ab_confirm_matrix
from harness.engines.projection_step import FactorBenches
from harness.engines.revisions import BenchRequest
from harness.errors import CompareError
from harness.reports.ab_confirm import stored_ab
from harness.reports.gate import evaluate
from harness.reports.projection import (
    class_of,
    judged_rows,
    m_bucket,
    machine_factors,
    pick_sample,
)
from harness.reports.stats import with_samples
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import Verdict
from harness.results.environment import Environment
from harness.results.models import matrix_dir, model_slug, target_dir
from harness.results.store import RunMeta, load_run, read_meta, write_run

S = load_settings("default")
REF, HERE = "synthetic H200", "synthetic H100"
BASE = make_rows(ms=(1, 16, 64, 256, 1024), seed=5, peers=(), modes=("graph", "cold"))
#: how the runner's model differs from the reference's, per path (bandwidth-bound paths
#: more), then per row by a fixed jitter of up to +-4%
MODEL = {"native_int4": 1.02, "fp16_cache": 1.35, "marlin_asym": 1.22}


def _jitter(case_id: str) -> float:
    return 1.0 + ((zlib.crc32(case_id.encode()) % 81) - 40) / 1000.0


def _model(row) -> float:
    return MODEL[row.path] * (1.0 if row.M <= 16 else 1.08) * _jitter(row.case_id)


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo(tmp_path, head_speed: dict[str, float]):
    """Two commits: the baseline's (every path at speed 1) and the current one."""
    r = tmp_path / "repo"
    (r / "harness").mkdir(parents=True)
    _git(r, "init", "-q")
    _git(r, "config", "user.email", "t@t")
    _git(r, "config", "user.name", "t")
    (r / "harness" / "speed.txt").write_text("")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "baseline")
    (r / "harness" / "speed.txt").write_text(
        "\n".join(f"{p} {f}" for p, f in head_speed.items()) + "\n")
    (r / "log.txt").write_text("next\n")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "current")
    return r, _git(r, "rev-parse", "HEAD~1"), _git(r, "rev-parse", "HEAD")


def _speeds(text: str) -> dict[str, float]:
    return {p: float(f) for p, f in (ln.split() for ln in text.splitlines() if ln.strip())}


def _here_rows(seed: int, speed: dict[str, float], commit: str) -> list:
    """A process on the runner's model: every row x its model factor x the commit's speed."""
    rows = resample(BASE, seed, noise=0.004,
                    factor={r.key: _model(r) * speed.get(r.path, 1.0) for r in BASE})
    return [with_samples(replace(r, commit=commit, device_name=HERE), r.samples())
            for r in rows]


class OnTheRunner:
    """Benches a revision on the runner's model (speed.txt of its worktree)."""

    def __init__(self):
        self.calls: list[BenchRequest] = []

    def __call__(self, req: BenchRequest) -> None:
        self.calls.append(req)
        speed = _speeds((req.worktree / "harness" / "speed.txt").read_text())
        rows = _here_rows(100 + len(self.calls), speed, req.revision[:12])
        if req.modes:
            rows = [r for r in rows if r.mode in req.modes]
        env = Environment(arch="sm90", gpu_name=HERE, commit=req.revision[:12])
        write_run(req.out_dir / req.revision[:12] / "sm90", rows,
                  RunMeta(matrix="synthetic", commit=req.revision[:12], arch="sm90",
                          environment=env))


def _baseline(tmp_path, base_sha: str) -> None:
    env = Environment(arch="sm90", gpu_name=REF, commit=base_sha[:12])
    write_run(tmp_path / "acc" / "sm90", BASE, RunMeta(
        matrix="synthetic", commit=base_sha[:12], arch="sm90", environment=env,
        settings=S.to_dict()))
    assert main(["baseline", "accept", str(tmp_path / "acc" / "sm90"),
                 "--root", str(tmp_path / "baselines"), "--yes"]) == 0


def _stored(tmp_path, base_sha: str, head_sha: str, speed: dict[str, float]):
    """The reference baseline, and the runner's run of ``head_sha`` gated as its bench
    gates it (timing rows TIMING_NOT_COMPARABLE)."""
    _baseline(tmp_path, base_sha)
    run_dir = tmp_path / "results" / head_sha[:12] / "sm90"
    cur = _here_rows(3, speed, head_sha[:12])
    env = Environment(arch="sm90", gpu_name=HERE, commit=head_sha[:12])
    write_run(run_dir, cur, RunMeta(matrix="synthetic", commit=head_sha[:12], arch="sm90",
                                    environment=env, settings=S.to_dict()))
    said: list[str] = []
    gate_against_baseline(cur, "synthetic", command="harness bench", run_dir=run_dir,
                          baselines=tmp_path / "baselines", arch="sm90", env=env,
                          settings=S, measured=S.to_dict(), echo=said.append)
    return run_dir, said


def _gated(run_dir):
    gate = read_meta(run_dir / "synthetic.json").extra["gate"]
    rows = {tuple(k.split("|")): v for k, v in gate["verdicts"].items()}
    return {k: v for k, v in rows.items() if k[-1] == "graph"}


def test_the_bench_alone_reads_another_model_timing_not_comparable_and_says_what_to_do(
        tmp_path):
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, said = _stored(tmp_path, base_sha, head_sha, {})
    assert set(_gated(run_dir).values()) == {"TIMING_NOT_COMPARABLE"}
    hint = [s for s in said if "no sm90 baseline of 'synthetic H100' yet" in s]
    assert len(hint) == 1 and "harness baseline record --runs" in hint[0]
    assert "models/synthetic-h100" in hint[0] and "\n" not in hint[0]


@pytest.mark.parametrize("per_class", [0, 1, 4])
def test_an_unchanged_build_on_another_model_gets_speed_verdicts_and_passes(
        tmp_path, capsys, per_class):
    """per_class 0 (the default) and 4 measure every row of this small matrix at the
    baseline's commit; 1
    projects most rows by their class's factor, and the rows whose own model difference
    puts them beyond the screen are cleared by the A/B."""
    settings = replace(S, projection_sample=per_class)
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {})
    fake = OnTheRunner()
    said: list[str] = []
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=settings, rounds=2, repo=repo, runner=fake,
                             echo=said.append)
    assert code == 0
    # the factor first: one bench at the baseline's commit, of the sample only, graph mode
    first = fake.calls[0]
    assert first.revision == base_sha and first.label == "A" and first.modes == ("graph",)
    # the factor's benches screen time only: fewer samples, a shorter warm-up, one
    # accuracy run (the defaults since the H100 calls of §16.7 and §16.22)
    assert first.settings == ("min_samples=5", "warmup_ms=5", "accuracy_runs=1")
    assert 0 < len(first.rows) <= (per_class or 10000) * 9
    verdicts = _gated(run_dir)
    judged = [v for v in verdicts.values() if v != "TIMING_NOT_COMPARABLE"]
    assert len(judged) >= 0.95 * len(verdicts) and set(judged) <= {"SAME", "FASTER"}
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert rec.projection is not None and rec.projection.runner_model == HERE
    # each class's factor is the model's, measured on the baseline's commit
    for cls, f in rec.projection.factors.items():
        path = cls.split("|")[0]
        assert f == pytest.approx(MODEL[path] * (1.0 if cls.endswith("M<=16") else 1.08),
                                  rel=0.05)
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "verdicts agree with the bench's stored gate on all" in out
    head = (tmp_path / "rep" / "report.md").read_text()
    assert "speed judged on this runner" in head and HERE in head
    # the fleet page names the model and how its speed was judged
    assert main(["merge", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "fleet")]) == 0
    summary = (tmp_path / "fleet" / "summary.md").read_text()
    assert HERE in summary and "on the runner: machine factor + A/B" in summary


@pytest.mark.parametrize("per_class", [0, 1, 4])
@pytest.mark.parametrize("slow", [{"fp16_cache": 1.05}, {"marlin_asym": 1.04},
                                  {"native_int4": 1.05}])
def test_a_real_slowdown_on_another_model_fails_that_path_and_no_other(tmp_path, slow,
                                                                        per_class):
    """A whole path slower (what most regressions look like) is not absorbed into its
    machine factor: the factor comes from the baseline's commit measured here."""
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=replace(S, projection_sample=per_class),
                             rounds=3, repo=repo, runner=OnTheRunner(), echo=lambda s: None)
    assert code == 1
    path = next(iter(slow))
    verdicts = _gated(run_dir)
    mine = [v for k, v in verdicts.items() if k[1] == path]
    assert sum(v == "SLOWER" for v in mine) >= 0.95 * len(mine)
    assert "SLOWER" not in {v for k, v in verdicts.items() if k[1] != path}


@pytest.mark.parametrize("per_class", [0, 1])
def test_a_real_speed_up_on_another_model_reads_faster_on_that_path_alone(tmp_path, per_class):
    """A path 6% faster is sent to A/B by the screen's faster side too, so the job says
    FASTER on another model, as the same-model gate does against its margins (before,
    the screen sent only slowdowns and every speed-up read SAME, 'projected'); the
    unchanged paths read SAME and the job passes."""
    fast = {"marlin_asym": 0.94}
    repo, base_sha, head_sha = _repo(tmp_path, fast)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, fast)
    fake = OnTheRunner()
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=replace(S, projection_sample=per_class),
                             rounds=3, repo=repo, runner=fake, echo=lambda s: None)
    assert code == 0
    verdicts = _gated(run_dir)
    mine = [v for k, v in verdicts.items() if k[1] == "marlin_asym"]
    assert sum(v == "FASTER" for v in mine) >= 0.95 * len(mine), mine
    assert set(v for k, v in verdicts.items() if k[1] != "marlin_asym") <= {"SAME"}
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    sources = {r.source for r in rec.rows if r.path == "marlin_asym" and r.mode == "graph"}
    assert sources == {""}                         # every one of them an A/B reading


#: the factor's benches at the bench's own settings
OWN = dict(projection_min_samples=0, projection_warmup_ms=0.0, projection_accuracy_runs=0)


@pytest.mark.parametrize("changes, expected", [
    ({}, ()),
    (dict(projection_min_samples=10), ("min_samples=10",)),
    (dict(projection_min_samples=10, projection_warmup_ms=5.0, projection_accuracy_runs=1),
     ("min_samples=10", "warmup_ms=5", "accuracy_runs=1")),
    (dict(projection_warmup_ms=2.5), ("warmup_ms=2.5",)),
])
def test_the_factor_benches_alone_take_the_projection_settings(tmp_path, changes, expected):
    """``projection_min_samples``, ``projection_warmup_ms`` and ``projection_accuracy_runs``
    reach the benches at the baseline's commit that measure the machine factor (``--set
    KEY=VALUE``) and no A/B bench: the factor's readings screen, the A/B's rounds decide."""
    repo, base_sha, head_sha = _repo(tmp_path, {"fp16_cache": 1.05})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {"fp16_cache": 1.05})
    fake = OnTheRunner()
    ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines", arch="sm90",
                      settings=replace(S, **{**OWN, **changes}), rounds=2, repo=repo,
                      runner=fake, echo=lambda s: None)
    factor = [c for c in fake.calls if c.out_dir.parent.name == "projection"]
    others = [c for c in fake.calls if c.out_dir.parent.name != "projection"]
    assert factor and others             # the 5% path went to A/B
    assert {c.settings for c in factor} == {expected}
    assert {c.settings for c in others} == {()}


def test_without_the_baselines_commit_the_rows_stay_not_comparable(tmp_path):
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, "d" * 40, head_sha, {})
    said: list[str] = []
    before = read_meta(run_dir / "synthetic.json").extra["gate"]
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, repo=repo, runner=OnTheRunner(),
                             echo=said.append) is None
    line = [s for s in said if "not judged" in s]
    assert len(line) == 1 and "stay TIMING_NOT_COMPARABLE" in line[0]
    assert read_meta(run_dir / "synthetic.json").extra["gate"] == before


def test_without_git_the_rows_stay_not_comparable(tmp_path, monkeypatch):
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {})
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))       # no git executable
    said: list[str] = []
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, repo=repo, runner=OnTheRunner(),
                             echo=said.append) is None
    assert any("git" in s and "TIMING_NOT_COMPARABLE" in s for s in said)


def test_a_model_with_a_baseline_of_its_own_is_gated_against_it(tmp_path, capsys):
    """`harness baseline accept` of the runner's run writes the model's own folder (the
    reference's rows are untouched); the next run on that model gets the usual gate."""
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {})
    ref_csv = (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text()
    capsys.readouterr()
    assert main(["baseline", "accept", str(run_dir), "--root", str(tmp_path / "baselines"),
                 "--yes"]) == 0
    out = capsys.readouterr().out
    own = tmp_path / "baselines" / "sm90" / "models" / model_slug(HERE)
    assert (own / "synthetic.csv").is_file() and "is not sm90's reference model" in out
    assert (tmp_path / "baselines" / "sm90" / "synthetic.csv").read_text() == ref_csv
    assert matrix_dir(tmp_path / "baselines", "sm90", HERE, "synthetic") == own
    assert matrix_dir(tmp_path / "baselines", "sm90", REF, "synthetic").name == "sm90"
    assert target_dir(tmp_path / "baselines", "sm90", REF) == tmp_path / "baselines" / "sm90"
    # a second process on this model: speed verdicts from the gate itself, no hint
    again = tmp_path / "again"
    rows = _here_rows(9, {}, head_sha[:12])
    env = Environment(arch="sm90", gpu_name=HERE, commit=head_sha[:12])
    write_run(again, rows, RunMeta(matrix="synthetic", commit=head_sha[:12], arch="sm90",
                                   environment=env, settings=S.to_dict()))
    said: list[str] = []
    assert gate_against_baseline(rows, "synthetic", command="harness bench", run_dir=again,
                                 baselines=tmp_path / "baselines", arch="sm90", env=env,
                                 settings=S, measured=S.to_dict(), echo=said.append) == 0
    assert not any("no sm90 baseline of" in s for s in said)
    assert "TIMING_NOT_COMPARABLE" not in str(read_meta(again / "synthetic.json").extra["gate"])
    # and `harness baseline show` lists both models
    capsys.readouterr()
    assert main(["baseline", "show", "--root", str(tmp_path / "baselines")]) == 0
    shown = capsys.readouterr().out
    assert REF in shown and HERE in shown


def test_the_sample_spreads_over_each_class_and_the_factor_is_its_median():
    cur = resample(BASE, 1, factor={r.key: _model(r) for r in BASE})
    cur = [replace(r, device_name=HERE) for r in cur]
    result = evaluate(cur, BASE, S, timing_reason="GPU model differs")
    judged = judged_rows(result, S)
    assert judged and {v.mode for v in judged} == {"graph"}          # cold rows: information
    sample = pick_sample(judged, 2)
    by_class: dict[str, list] = {}
    for v in sample:
        by_class.setdefault(class_of(v.current), []).append(v)
    for cls, rows in by_class.items():
        times = sorted(v.baseline.time_us_median for v in judged
                       if class_of(v.current) == cls)
        assert {v.baseline.time_us_median for v in rows} == {times[0], times[-1]}
    assert pick_sample(judged, 2) == sample                          # deterministic
    measured = {v.key: v.current for v in sample}
    factors = machine_factors(judged, measured)
    assert factors["fp16_cache|graph|M<=16"] == pytest.approx(1.35, rel=0.05)
    assert m_bucket(1) == "M<=16" and m_bucket(64) == "M<=256" and m_bucket(1024) == "M>256"
    assert {v.verdict for v in judged} == {Verdict.TIMING_NOT_COMPARABLE}


def test_report_replays_each_matrix_against_its_own_baseline_commit(tmp_path, capsys):
    """A run of two matrices whose baselines name other commits (after `baseline accept
    --only-faster`, production's json names the new commit, ppl's the old): the report
    applies each matrix's A/B record against its own baseline's commit. On the H100 the
    report read 224 rows TIMING_NOT_COMPARABLE that the job had judged, because it checked
    every record against the first matrix's commit."""
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {})
    first = [replace(r, matrix="aaa") for r in BASE]          # read first, another commit
    env = Environment(arch="sm90", gpu_name=REF, commit="e" * 12)
    write_run(tmp_path / "acc2" / "sm90", first, RunMeta(
        matrix="aaa", commit="e" * 12, arch="sm90", environment=env, settings=S.to_dict()))
    assert main(["baseline", "accept", str(tmp_path / "acc2" / "sm90"),
                 "--root", str(tmp_path / "baselines"), "--yes"]) == 0
    mine = [replace(r, matrix="aaa") for r in _here_rows(4, {}, head_sha[:12])]
    here = Environment(arch="sm90", gpu_name=HERE, commit=head_sha[:12])
    write_run(run_dir, mine, RunMeta(matrix="aaa", commit=head_sha[:12], arch="sm90",
                                     environment=here, settings=S.to_dict()))
    gate_against_baseline(mine, "aaa", command="harness bench", run_dir=run_dir,
                          baselines=tmp_path / "baselines", arch="sm90", env=here,
                          settings=S, measured=S.to_dict(), echo=lambda s: None)
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=2, repo=repo,
                             runner=OnTheRunner(), echo=lambda s: None) == 0
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == 0
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out


class Pipelining(OnTheRunner):
    """``OnTheRunner`` with ``start``/``release``/``finish``/``abort``, as the subprocess
    runner has: what was started, released and finished, in order."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, str]] = []

    def _name(self, req) -> str:
        return f"{req.out_dir.parent.name}/{req.out_dir.name}"

    def start(self, req):
        self.events.append(("start", self._name(req)))
        return req

    def release(self, req):
        self.events.append(("release", self._name(req)))

    def finish(self, req):
        self.events.append(("finish", self._name(req)))
        self(req)

    def abort(self, req):
        self.events.append(("abort", self._name(req)))


@pytest.mark.parametrize("slow, exit_code", [({}, 0), ({"fp16_cache": 1.05}, 1)])
@pytest.mark.parametrize("screen_round", [0, 1])
def test_the_factor_starts_before_the_ppl_step_then_the_ab(tmp_path, slow, exit_code,
                                                           screen_round):
    """``Confirmation.start`` (before the job's ppl step) starts the factor's benches,
    held at their gates, and measures nothing; ``finish`` measures them, then A/Bs the
    screened rows: by default every round of each side measured; with ``ab_screen_round``
    1 the factor's readings are side A's round 0 and the job's own side B's (rounds - 1
    benches of each side, the record still of ``rounds`` rounds)."""
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    fake = Pipelining()
    seconds: dict[str, float] = {}
    with Confirmation(run_dir, ["synthetic"], baselines=tmp_path / "baselines", arch="sm90",
                      settings=replace(S, ab_screen_round=screen_round), rounds=3, repo=repo,
                      runner=fake, echo=lambda s: None, seconds=seconds) as conf:
        conf.start()
        assert [e for e, _ in fake.events] == ["start", "start"]   # the factor, and its shadow
        assert fake.events[0][1] == f"projection/base-{base_sha[:12]}" and not fake.calls
        codes = conf.finish()
    assert codes == {"synthetic": exit_code}
    assert {"machine factor", "A/B"} <= set(seconds)
    ab = [c for c in fake.calls if c.out_dir.parent.name != "projection"]
    rounds = [1, 2] if screen_round else [0, 1, 2]
    if not slow:
        assert not ab or len(ab) == 2 * len(rounds)     # anything screened: A and B each round
        return
    assert sorted((c.label, c.round) for c in ab) == [(s, r) for s in "AB" for r in rounds]
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert rec.rounds == 3 and rec.seeded == bool(screen_round)
    gate = read_meta(run_dir / "synthetic.json").extra["gate"]
    assert any("round 0 of each A/B side: the readings taken before it" in n
               for n in gate["notes"]) == bool(screen_round)
    verdicts = _gated(run_dir)
    mine = [v for k, v in verdicts.items() if k[1] == "fp16_cache"]
    assert sum(v == "SLOWER" for v in mine) >= 0.95 * len(mine)
    assert "SLOWER" not in {v for k, v in verdicts.items() if k[1] != "fp16_cache"}


def _lift(run_dir, key, by: float) -> None:
    """One row of the stored run (the job's own bench) read ``by`` slower."""
    run = load_run(run_dir)
    rows = [with_samples(r, [t * (1 + by) for t in r.samples()]) if r.key == key else r
            for r in run.rows]
    write_run(run_dir, rows, run.metas["synthetic"])


@pytest.mark.parametrize("screen_round", [0, 1])
def test_the_reading_that_chose_a_row_is_no_round_of_its_ab_by_default(tmp_path, screen_round):
    """Unchanged code whose own bench read one row 3% slow by chance: the screen sends
    that row to the A/B. Taken as round 0 (``ab_screen_round`` 1) the chance reading
    widens the rounds' spread and lifts their mean toward the 2% line: a close call, sent
    to the extra rounds. By default every round is measured afresh: the row reads SAME
    with no extra round, at the 2% threshold."""
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {})
    key = next(r.key for r in BASE if r.path == "fp16_cache" and r.mode == "graph"
               and r.M == 64)
    _lift(run_dir, key, 0.03)
    run = load_run(run_dir)
    gate_against_baseline(run.rows, "synthetic", command="harness bench", run_dir=run_dir,
                          baselines=tmp_path / "baselines", arch="sm90", env=run.environment,
                          settings=S, measured=S.to_dict(), echo=lambda s: None)
    ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines", arch="sm90",
                      settings=replace(S, ab_screen_round=screen_round), rounds=3, repo=repo,
                      runner=OnTheRunner(), echo=lambda s: None)
    row = next(r for r in stored_ab(read_meta(run_dir / "synthetic.json")).rows if r.key == key)
    assert row.verdict == "SAME"
    if screen_round:
        assert row.rounds == 3 + S.ab_extra_rounds
    else:
        assert row.rounds == 0 and abs(row.change) < 0.005 and row.threshold < 0.021


class HeadSlowOnOneRow(OnTheRunner):
    """``OnTheRunner`` whose A/B benches of the current commit read one row 3% slow: the
    bimodal row of t2 (962674c), 20.0 us in the job's own bench and 20.4-20.6 us in each
    of the A/B's three processes of the same build."""

    def __init__(self, key, head: str):
        super().__init__()
        self.key, self.head = key, head

    def __call__(self, req: BenchRequest) -> None:
        super().__call__(req)
        if req.out_dir.parent.name == "projection" or req.revision != self.head:
            return
        folder = req.out_dir / req.revision[:12] / "sm90"
        run = load_run(folder)
        _lift(folder, self.key, 0.03) if any(r.key == self.key for r in run.rows) else None


def test_an_ab_reading_against_the_screens_direction_is_no_verdict(tmp_path, capsys):
    """Unchanged code on another model: the job's own bench read one row 3% fast, so the
    two-sided screen sends it to A/B as faster; the A/B's processes of the current commit
    read it 3% slow. Two readings of one commit pair that disagree in sign are the spread
    between processes: the row reads SAME ('contradicted', the A/B's change kept), the job
    passes, the report replays it. A row the screen sends as slower is failed by its A/B
    as before (the slowdown tests above)."""
    repo, base_sha, head_sha = _repo(tmp_path, {})
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, {})
    key = next(r.key for r in BASE if r.path == "marlin_asym" and r.mode == "graph"
               and r.M == 256)
    _lift(run_dir, key, -0.03)
    run = load_run(run_dir)
    gate_against_baseline(run.rows, "synthetic", command="harness bench", run_dir=run_dir,
                          baselines=tmp_path / "baselines", arch="sm90", env=run.environment,
                          settings=S, measured=S.to_dict(), echo=lambda s: None)
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=3, repo=repo,
                             runner=HeadSlowOnOneRow(key, head_sha), echo=lambda s: None)
    assert code == 0
    row = next(r for r in stored_ab(read_meta(run_dir / "synthetic.json")).rows if r.key == key)
    assert (row.source, row.verdict) == ("contradicted", "SAME") and row.change > 0.02
    assert _gated(run_dir)[key] == "SAME"
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == 0
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out
    rep = (tmp_path / "rep" / "report.csv").read_text()
    assert rep.count("the other way: two readings that disagree in direction") == 1


def test_rows_projected_by_a_class_factor_get_every_ab_round_measured(tmp_path):
    """With ``projection_sample`` > 0 most rows have no reading at the baseline's commit:
    no seeds, every round of both sides measured, as on the model's own baseline."""
    slow = {"fp16_cache": 1.05}
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    fake = OnTheRunner()
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=replace(S, projection_sample=1), rounds=3,
                             repo=repo, runner=fake, echo=lambda s: None) == 1
    ab = [c for c in fake.calls if c.out_dir.parent.name != "projection"]
    assert sorted({c.round for c in ab}) == [0, 1, 2]
    assert not stored_ab(read_meta(run_dir / "synthetic.json")).seeded


class OneFactorRowFails(OnTheRunner):
    """``OnTheRunner`` whose factor bench records one fp16_cache graph row as an error."""

    def __call__(self, req: BenchRequest) -> None:
        super().__call__(req)
        if req.out_dir.parent.name != "projection":
            return
        folder = req.out_dir / req.revision[:12] / "sm90"
        rows = list(load_run(folder).rows)
        bad = next(i for i, r in enumerate(rows) if r.path == "fp16_cache" and r.mode == "graph")
        rows[bad] = replace(rows[bad], status="error", error="planted", samples_us="",
                            n_samples=0)
        env = Environment(arch="sm90", gpu_name=HERE, commit=req.revision[:12])
        write_run(folder, rows, RunMeta(matrix="synthetic", commit=req.revision[:12],
                                        arch="sm90", environment=env))


def test_a_factor_reading_that_failed_is_no_round_0(tmp_path):
    """A screened row whose reading at the baseline's commit failed: no seeds at all, every
    A/B round of both sides measured (a failed reading pooled in would fail the row)."""
    slow = {"fp16_cache": 1.05}
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    fake = OneFactorRowFails()
    ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines", arch="sm90",
                      settings=S, rounds=3, repo=repo, runner=fake, echo=lambda s: None)
    ab = [c for c in fake.calls if c.out_dir.parent.name != "projection"]
    assert ab and sorted({c.round for c in ab}) == [0, 1, 2]     # the 5% path went to A/B
    assert not stored_ab(read_meta(run_dir / "synthetic.json")).seeded


class ABFails(OnTheRunner):
    """``OnTheRunner`` whose A/B benches (not the factor's) fail as a bench exiting 2 does."""

    def __call__(self, req: BenchRequest) -> None:
        if req.out_dir.parent.name != "projection":
            raise CompareError(f"bench of {req.label} round {req.round} exited 2: planted")
        super().__call__(req)


def test_an_ab_that_gives_no_reading_leaves_the_screens_verdict_standing(tmp_path, capsys):
    """The screen sent a 5% slower path to an A/B that failed (n3 of 2026-12-06: the
    regression's rows stayed TIMING_NOT_COMPARABLE and the job passed): the screen's
    verdict against the projection stands, as a same-model bench's verdicts stand when its
    A/B fails; the path fails, no other row does, the report replays it."""
    slow = {"fp16_cache": 1.05}
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    said: list[str] = []
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=3, repo=repo, runner=ABFails(),
                             echo=said.append)
    assert code == 1
    verdicts = _gated(run_dir)
    mine = [v for k, v in verdicts.items() if k[1] == "fp16_cache"]
    assert sum(v == "SLOWER" for v in mine) >= 0.95 * len(mine)
    assert "SLOWER" not in {v for k, v in verdicts.items() if k[1] != "fp16_cache"}
    assert "TIMING_NOT_COMPARABLE" not in set(verdicts.values())
    line = [s for s in said if "screened row(s) got no A/B reading" in s]
    assert len(line) == 1 and "SLOWER)" in line[0]
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert {r.source for r in rec.rows if r.path == "fp16_cache" and r.mode == "graph"} \
        == {"screened"}
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == 1
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out


def test_a_verdict_above_the_speed_call_in_an_ab_reads_as_the_rows_own_speed():
    """The dispatch policy's WINNER_CHANGED in an A/B (n4 of 2026-12-06: fp16_cache's
    regression made marlin_asym its class's winner), or an accuracy verdict (Marlin's race
    in one round), outranks the speed call the A/B made: the reading is that call, by the
    gate's rule on change, p-value and threshold, never "no reading" (which left n4's
    unconfirmed screen verdict, SLOWER, standing). A row without timing gives none."""
    rows = make_rows(ms=(1,), seed=5, peers=())
    v = next(x for x in evaluate(rows, rows, S).verdicts
             if x.current is not None and x.mode == "graph")
    for overlay in (Verdict.WINNER_CHANGED, Verdict.NONDETERMINISTIC,
                    Verdict.WORSE_ACCURACY):
        for change, p, want in ((0.004, 0.001, "SAME"), (0.05, 0.3, "AMBIGUOUS"),
                                (0.05, 0.001, "SLOWER"), (-0.05, 0.001, "FASTER")):
            got = {("m", *v.key): replace(v, verdict=overlay, time_change=change,
                                           threshold=0.02, p_value=p)}
            assert reading_of("m", v, got, {}) == (want, change, 0.02, 0), (overlay, change)
    # no timing: no reading
    got = {("m", *v.key): replace(v, verdict=Verdict.ERROR, current=replace(
        v.current, status="error"), time_change=float("nan"))}
    assert reading_of("m", v, got, {})[0] == "ERROR"


class AskedRowsOnly(OnTheRunner):
    """``OnTheRunner`` whose benches record the rows they were not asked for as
    unavailable, as ``harness bench --rows`` does."""

    def __call__(self, req: BenchRequest) -> None:
        super().__call__(req)
        folder = req.out_dir / req.revision[:12] / "sm90"
        asked = set(req.rows)
        rows = [r if (r.case_id, r.path) in asked else replace(
            r, status="unavailable", error="not asked", samples_us="", n_samples=0)
            for r in load_run(folder).rows]
        env = Environment(arch="sm90", gpu_name=HERE, commit=req.revision[:12])
        write_run(folder, rows, RunMeta(matrix="synthetic", commit=req.revision[:12],
                                        arch="sm90", environment=env))


def test_each_factor_bench_gives_only_its_own_commits_rows(tmp_path):
    """Two baseline commits, each bench recording the other's rows of its cases as
    unavailable: every planned row keeps the reading of its own commit's bench, whichever
    bench ran last."""
    repo, base_sha, head_sha = _repo(tmp_path, {})
    verdicts = [v for v in evaluate(BASE, BASE, S).verdicts
                if v.current is not None and v.mode == "graph" and v.current.M == 1]
    fp16 = [v for v in verdicts if v.path == "fp16_cache"]
    other = [v for v in verdicts if v.path != "fp16_cache"]
    plan = {head_sha: [("synthetic", v) for v in fp16],
            base_sha: [("synthetic", v) for v in other]}
    with FactorBenches(plan, repo=repo, work_dir=tmp_path / "f", runner=AskedRowsOnly(),
                       universe={"synthetic": list(BASE)}, echo=lambda s: None) as benches:
        got = benches.collect()
    assert set(got) == {("synthetic", v.key) for v in verdicts}
    assert {r.status for r in got.values()} == {"ok"}
    assert {r.commit for k, r in got.items() if k[1][1] == "fp16_cache"} == {head_sha[:12]}
