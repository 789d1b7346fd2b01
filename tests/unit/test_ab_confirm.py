"""Same-machine A/B confirmation (``harness job --ab-confirm``): a stored-baseline SLOWER
that is this machine's offset is cleared, a real slowdown is kept, an unusable A/B
reading keeps the row failing, and ``harness report`` replays the stored record to the
same verdicts. The A/B bench is a fake runner in a real git repository."""

from __future__ import annotations

import math
import subprocess
from dataclasses import replace

import pytest

from harness.cli import main
from harness.config import load_settings
from harness.engines.ab_step import ab_confirm_matrix
from harness.engines.revisions import BenchRequest
from harness.reports.ab_confirm import (
    ABRecord,
    ABRow,
    apply_ab,
    path_moves,
    record_for,
    same_commit,
    screen_keys,
    stored_ab,
)
from harness.reports.gate import evaluate
from harness.reports.gate_record import write_gate_record
from harness.reports.stats import with_samples
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import Verdict
from harness.results.environment import Environment
from harness.results.store import RunMeta, load_run, read_meta, write_run

S = load_settings("default")
BASE = make_rows(ms=(1, 16), seed=5, peers=())
SLOW = {"marlin_asym": 1.06}         # the stored run reads marlin_asym 6% over the baseline


def _gate(factor=SLOW):
    return evaluate(resample(BASE, 3, factor=factor), BASE, S, current_label="cur")


def _record(verdict: str, change: float = 0.002, matrix: str = "synthetic") -> ABRecord:
    rows = tuple(ABRow(*v.key, verdict, change) for v in _gate().failures)
    return ABRecord(matrix, "b" * 40, "c" * 40, 3, rows)


def test_the_stored_gate_fails_marlin_asym_slower():
    failing = _gate().failures
    assert failing and {(v.verdict, v.path) for v in failing} == {(Verdict.SLOWER, "marlin_asym")}


@pytest.mark.parametrize("verdict, exit_code, word", [
    ("SAME", 0, "cleared by A/B"), ("FASTER", 0, "cleared by A/B"),
    ("SLOWER", 1, "confirmed by A/B"), ("AMBIGUOUS", 1, "not cleared by A/B"),
    ("MISSING", 1, "not cleared by A/B"),
])
def test_apply_ab_clears_only_on_a_same_or_faster_reading(verdict, exit_code, word):
    result = _gate()
    out = apply_ab(result, _record(verdict))
    assert out.exit_code == exit_code
    touched = [v for v in out.verdicts if v.path == "marlin_asym"]
    assert touched and all(any(word in r for r in v.reasons) for v in touched)
    assert "A/B on this machine" in out.notes[-1]
    assert [v.key for v in out.verdicts if v.path != "marlin_asym"] == \
           [v.key for v in result.verdicts if v.path != "marlin_asym"]


def test_a_record_of_another_matrix_or_none_changes_nothing():
    result = _gate()
    assert apply_ab(result, None) is result
    assert apply_ab(result, _record("SAME", matrix="other")).exit_code == 1


def test_the_record_round_trips_and_a_malformed_one_is_one_line():
    rec = replace(_record("SAME"), rows=_record("SAME").rows + (
        ABRow("c", "p", "graph", "MISSING", math.nan),))
    back = ABRecord.from_dict(rec.to_dict())
    assert back.rows[:-1] == rec.rows[:-1] and math.isnan(back.rows[-1].change)
    with pytest.raises(ValueError, match="synthetic.json: malformed 'ab_confirm'"):
        ABRecord.from_dict({"rows": {"a|b": {}}}, "synthetic.json")


def test_a_reading_names_the_move_it_had_to_exceed_where_the_record_holds_it():
    rows = tuple(ABRow(*v.key, "SAME", 0.041, 0.066) for v in _gate().failures)
    rec = ABRecord("synthetic", "b" * 40, "c" * 40, 3, rows)
    d = rec.to_dict()
    assert d["version"] == 5 and ABRecord.from_dict(d) == rec and "seeded" not in d
    seeded = replace(rec, seeded=True)           # round 0 of each side measured before it
    assert seeded.to_dict()["seeded"] is True and ABRecord.from_dict(seeded.to_dict()) == seeded
    said = [r for v in apply_ab(_gate(), rec).verdicts for r in v.reasons if "A/B" in r]
    assert said and all("+4.10% (SAME, threshold 6.60%)" in r for r in said)
    # a row judged on more rounds than the record's says how many, and on what threshold
    more = ABRecord("synthetic", "b" * 40, "c" * 40, 3,
                    tuple(replace(r, verdict="SLOWER", rounds=7) for r in rows))
    assert ABRecord.from_dict(more.to_dict()) == more
    said = [r for v in apply_ab(_gate(), more).verdicts for r in v.reasons if "A/B" in r]
    assert said and all("threshold 6.60% after 7 rounds, from the standard error" in r
                        for r in said)
    # a version-2 record has no rounds: each row read as judged on the record's rounds
    assert all(r.rounds == 0 for r in ABRecord.from_dict({**d, "version": 2}).rows)
    # a version-1 record (2026-12-04 and before) has no threshold: read as NaN, not named
    for row in d["rows"].values():
        del row["threshold"]
    old = ABRecord.from_dict({**d, "version": 1})
    assert all(math.isnan(r.threshold) for r in old.rows)
    said = [r for v in apply_ab(_gate(), old).verdicts for r in v.reasons if "A/B" in r]
    assert said and all("+4.10% (SAME)" in r for r in said)


# ------------------------------------------------------------ measured through git worktrees
def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _repo(tmp_path, head_speed: str):
    """Two commits: the baseline's (speed 1.00) and the current one (``head_speed``)."""
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q")
    _git(r, "config", "user.email", "t@t")
    _git(r, "config", "user.name", "t")
    (r / "harness").mkdir()
    (r / "harness" / "speed.txt").write_text("1.00\n")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "baseline")
    (r / "harness" / "speed.txt").write_text(head_speed + "\n")
    (r / "log.txt").write_text("next\n")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "current")
    return r, _git(r, "rev-parse", "HEAD~1"), _git(r, "rev-parse", "HEAD")


class ThisMachine:
    """Benches a revision here: marlin_asym's time x the worktree's speed.txt, with this
    machine's offset (x ``offset``) on every row of both revisions alike."""

    def __init__(self, offset: float = 1.06):
        self.offset, self.calls = offset, []

    def __call__(self, req: BenchRequest) -> None:
        self.calls.append(req)
        speed = float((req.worktree / "harness" / "speed.txt").read_text())
        rows = resample(BASE, seed=len(self.calls),
                        factor={p: self.offset * (speed if p == "marlin_asym" else 1.0)
                                for p in {r.path for r in BASE}})
        rows = [with_samples(replace(r, commit=req.revision[:12]), r.samples()) for r in rows]
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=req.revision[:12])
        write_run(req.out_dir / req.revision[:12] / "sm90", rows,
                  RunMeta(matrix="synthetic", commit=req.revision[:12], arch="sm90",
                          environment=env))


def _stored(tmp_path, base_sha: str, head_sha: str, factor=SLOW, baseline=BASE):
    """baselines/sm90 (``baseline``'s rows) recorded at ``base_sha`` on another machine;
    this machine's run of ``head_sha`` (BASE's rows) stored with its gate record
    (marlin_asym x ``factor``: failing SLOWER at the default 6%)."""
    env = Environment(arch="sm90", gpu_name="synthetic H200", commit=base_sha[:12])
    write_run(tmp_path / "acc" / "sm90", baseline, RunMeta(
        matrix="synthetic", commit=base_sha[:12], arch="sm90", environment=env,
        settings=S.to_dict()))
    assert main(["baseline", "accept", str(tmp_path / "acc" / "sm90"),
                 "--root", str(tmp_path / "baselines"), "--yes"]) == 0
    run_dir = tmp_path / "results" / head_sha[:12] / "sm90"
    cur = resample(BASE, 3, factor=factor)
    write_run(run_dir, cur, RunMeta(matrix="synthetic", commit=head_sha[:12], arch="sm90",
                                    environment=replace(env, commit=head_sha[:12]),
                                    settings=S.to_dict()))
    write_gate_record(run_dir / "synthetic.csv", evaluate(cur, BASE, S))
    return run_dir


@pytest.mark.parametrize("head_speed, exit_code", [("1.00", 0), ("1.05", 1)])
def test_ab_confirm_clears_the_machine_offset_and_keeps_a_real_slowdown(
        tmp_path, capsys, head_speed, exit_code):
    repo, base_sha, head_sha = _repo(tmp_path, head_speed)
    run_dir = _stored(tmp_path, base_sha, head_sha)
    fake = ThisMachine()
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=2, repo=repo, runner=fake,
                             echo=lambda s: None)
    assert code == exit_code
    assert {c.revision for c in fake.calls} == {base_sha, head_sha}
    # every case has a flagged marlin_asym row: the whole matrix, one path
    assert all(c.paths == ("marlin_asym",) and c.filter == "" for c in fake.calls)
    # the interleaved rounds only: no extra re-measure round after them (it cost ~55 s)
    assert [c.out_dir.parent.name for c in fake.calls] == ["round0"] * 2 + ["round1"] * 2
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert rec.baseline_commit == base_sha and rec.current_commit == head_sha
    assert {r.verdict for r in rec.rows} == {"SAME" if exit_code == 0 else "SLOWER"}
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == exit_code
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out


def test_a_graph_only_run_stays_partial_through_the_ab(tmp_path, capsys):
    """`harness job --mode graph` (a partial bench) against a baseline with cold rows too:
    on the H200 the A/B step re-gated the run as if complete, and its rewritten record
    failed the 168 unmeasured cold rows as MISSING beside the confirmed SLOWER ones."""
    from harness.results.store import load_run

    repo, base_sha, head_sha = _repo(tmp_path, "1.05")
    both = BASE + [replace(r, mode="cold") for r in BASE]   # the baseline has cold rows too
    run_dir = _stored(tmp_path, base_sha, head_sha, baseline=both)
    cur = list(load_run(run_dir / "synthetic.csv").rows)
    full = evaluate(cur, both, S)
    assert "MISSING" in {v.verdict.value for v in full.failures}   # what the bug stored
    write_gate_record(run_dir / "synthetic.csv", evaluate(cur, both, S, partial=True),
                      partial=True)
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=2, repo=repo,
                             runner=ThisMachine(), echo=lambda s: None)
    gate = read_meta(run_dir / "synthetic.json").extra["gate"]
    assert code == 1 and gate["partial"] is True
    assert set(gate["failing"]) == {"SLOWER"} and len(gate["verdicts"]) == len(cur)
    capsys.readouterr()   # report and compare read it as partial without being told
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == 1
    out = capsys.readouterr().out
    assert "verdicts agree with the bench's stored gate on all" in out and "MISSING" not in out
    assert main(["compare", str(tmp_path / "baselines" / "sm90"), str(run_dir),
                 "--out", str(tmp_path / "cmp")]) == 1
    assert "MISSING" not in capsys.readouterr().out


def test_ab_confirm_says_why_when_the_baseline_commit_is_not_in_the_repository(tmp_path):
    repo, base_sha, head_sha = _repo(tmp_path, "1.00")
    run_dir = _stored(tmp_path, "d" * 40, head_sha)
    said = []
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, repo=repo, runner=ThisMachine(),
                             echo=said.append) is None
    assert "A/B of synthetic not done, its verdicts stand" in said[-1]
    assert stored_ab(read_meta(run_dir / "synthetic.json")) is None


def test_the_runs_plugins_go_to_the_current_side_only(tmp_path):
    """A run measured with --plugin (a planted slowdown) is A/B'd with that plugin on the
    current commit's side: what the run measured is what A/B measures there."""
    from harness.results.store import write_meta

    repo, base_sha, head_sha = _repo(tmp_path, "1.00")
    run_dir = _stored(tmp_path, base_sha, head_sha)
    meta = read_meta(run_dir / "synthetic.json")
    write_meta(run_dir / "synthetic.json",
               replace(meta, extra={**meta.extra, "plugins": ["tests/planted/slow.py"]}))
    fake = ThisMachine()
    ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines", arch="sm90",
                      settings=S, rounds=1, repo=repo, runner=fake, echo=lambda s: None)
    sides = {(c.revision, c.plugins) for c in fake.calls}
    assert sides == {(base_sha, ()), (head_sha, ("tests/planted/slow.py",))}


@pytest.mark.parametrize("head_speed, exit_code", [("1.00", 0), ("1.05", 1)])
def test_the_screen_sends_a_row_inside_its_margin_to_ab_and_ab_decides(
        tmp_path, capsys, head_speed, exit_code):
    """marlin_asym reads +1.5% against the stored baseline: inside the 2% threshold (SAME,
    exit 0 on the cross-machine gate) but beyond the 1% path screen, so it is measured A/B.
    A real 5% there makes it a failing SLOWER ("found by the A/B screen"); an unchanged
    build leaves it SAME. report and compare replay the same verdicts."""
    repo, base_sha, head_sha = _repo(tmp_path, head_speed)
    run_dir = _stored(tmp_path, base_sha, head_sha, factor={"marlin_asym": 1.015})
    gate = read_meta(run_dir / "synthetic.json").extra["gate"]
    assert gate["exit_code"] == 0
    fake = ThisMachine(offset=1.015)
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=2, repo=repo, runner=fake,
                             echo=lambda s: None)
    assert code == exit_code
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert rec.rows and {r.path for r in rec.rows} == {"marlin_asym"}
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == exit_code
    out = capsys.readouterr().out
    assert "verdicts agree with the bench's stored gate on all" in out
    assert main(["compare", str(tmp_path / "baselines" / "sm90"), str(run_dir),
                 "--out", str(tmp_path / "cmp")]) == exit_code
    for written in (tmp_path / "rep" / "report.csv", tmp_path / "cmp" / "compare.csv"):
        text = written.read_text()
        assert ("found by the A/B screen" in text) == bool(exit_code)
        assert "A/B screen: A/B on this machine" in text or exit_code


def test_nothing_moved_nothing_measured(tmp_path):
    """A run within the screen of its baseline: no A/B bench is started."""
    repo, base_sha, head_sha = _repo(tmp_path, "1.00")
    run_dir = _stored(tmp_path, base_sha, head_sha, factor={})
    fake = ThisMachine()
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, repo=repo, runner=fake,
                             echo=lambda s: None) is None
    assert fake.calls == []


def test_a_record_applies_only_to_the_baseline_it_was_measured_against():
    meta = RunMeta(matrix="synthetic", commit="c" * 12, arch="sm90",
                   extra={"ab_confirm": _record("SAME").to_dict()})
    assert record_for(meta, "b" * 12) is not None
    assert record_for(meta, "e" * 12) is None
    assert same_commit("abcdef1234", "ABCDEF1") and not same_commit("abc", "abc")


def _moved(changes: dict) -> list:
    """BASE with each key's samples x (1 + change) (key -> change)."""
    return [with_samples(r, [s * (1 + changes[r.key]) for s in r.samples()])
            if r.key in changes else r for r in BASE]


def test_the_screen_flags_rows_beyond_it_and_every_row_of_a_path_that_moved_as_a_whole():
    asym = [r.key for r in BASE if r.path == "marlin_asym" and r.status == "ok"]
    assert len(asym) >= 4
    # 60% of marlin_asym's rows +4%, the rest unchanged: the path's median moved +4%
    moved = {k: (0.04 if i < 0.6 * len(asym) else 0.0) for i, k in enumerate(asym)}
    keys = screen_keys(_moved(moved), BASE, S)
    assert set(asym) <= keys                      # the unchanged 40% too (path-wide move)
    assert all(k[1] == "marlin_asym" for k in keys)
    # one row +4%, the path's median unchanged: that row only
    one = screen_keys(_moved({asym[0]: 0.04}), BASE, S)
    assert one == {asym[0]}
    # +1.5% everywhere: inside the 2% row screen, beyond the 1% path screen: the whole path
    assert screen_keys(_moved({k: 0.015 for k in asym}), BASE, S) == set(asym)
    # +0.8% everywhere (inside both screens), and nothing moved: nothing to A/B
    assert screen_keys(_moved({k: 0.008 for k in asym}), BASE, S) == set()
    assert screen_keys(BASE, BASE, S) == set()
    # wider screens let the 4% path through
    assert screen_keys(_moved(moved), BASE, replace(S, ab_screen=0.05, ab_path_screen=0.05)) \
        == set()


def test_the_job_says_which_rows_a_path_wide_move_sent(tmp_path):
    """q4 of 2026-12-06: the screen sent 14 SwiGLU rows that had each moved under 0.5%,
    for their path's move against the others, and the job's line said they "moved beyond
    the 2.0% screen". It now counts them apart and names the path and its move."""
    repo, base_sha, head_sha = _repo(tmp_path, "1.00")
    run_dir = _stored(tmp_path, base_sha, head_sha, factor={"marlin_asym": 1.015})
    lines: list[str] = []
    ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines", arch="sm90",
                      settings=S, repo=repo, runner=ThisMachine(), echo=lines.append)
    asym = sum(1 for r in BASE if r.path == "marlin_asym" and r.status == "ok")
    said = next(line for line in lines if line.startswith("harness job: A/B of synthetic:"))
    assert said.startswith("harness job: A/B of synthetic: 0 SLOWER row(s), 0 more moved "
                           f"beyond the 2.0% screen, {asym} more of a path that moved beyond "
                           "1.0% against the others: marlin_asym (graph) +1.")


class UnaskedClose(ThisMachine):
    """``ThisMachine``, every row measured whatever a request names (as a SwiGLU pair's
    bench measures the derived row with the one asked), fp16_cache 2.2% slower at HEAD:
    a close call on rows nothing sent to the A/B."""

    def __call__(self, req: BenchRequest) -> None:
        super().__call__(req)
        if float((req.worktree / "harness" / "speed.txt").read_text()) > 1.0:
            out = req.out_dir / req.revision[:12] / "sm90"
            run = load_run(out)
            write_run(out, [with_samples(r, [t * 1.022 for t in r.samples()])
                            if r.path == "fp16_cache" else r for r in run.rows],
                      run.metas["synthetic"])


def test_the_jobs_extra_rounds_skip_rows_it_did_not_ask_for(tmp_path):
    """The job's A/B confirms marlin_asym's SLOWER rows; its benches also measure
    fp16_cache, which reads +2.2% at HEAD (close to the 2% line) but was never sent: no
    extra round is spent on it (``compare``'s ``decide``, q4 of 2026-12-06)."""
    repo, base_sha, head_sha = _repo(tmp_path, "1.05")
    run_dir = _stored(tmp_path, base_sha, head_sha)
    fake = UnaskedClose(offset=1.0)
    assert ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, repo=repo, runner=fake,
                             echo=lambda s: None) == 1
    assert len(fake.calls) == 6                   # three rounds a side, no extra round
    rows = stored_ab(read_meta(run_dir / "synthetic.json")).rows
    assert rows and all(r.path == "marlin_asym" and r.verdict == "SLOWER" and not r.rounds
                        for r in rows)


class TwoMatrices(ThisMachine):
    """``ThisMachine`` for a bench of several matrices (``--matrix a,b``): each matrix's
    rows (BASE renamed) in its own CSV of the one run directory."""

    def __call__(self, req: BenchRequest) -> None:
        self.calls.append(req)
        speed = float((req.worktree / "harness" / "speed.txt").read_text())
        for matrix in req.matrix.split(","):
            rows = resample([replace(r, matrix=matrix) for r in BASE], seed=len(self.calls),
                            factor={p: self.offset * (speed if p == "marlin_asym" else 1.0)
                                    for p in {r.path for r in BASE}})
            rows = [with_samples(replace(r, commit=req.revision[:12]), r.samples())
                    for r in rows]
            env = Environment(arch="sm90", gpu_name="synthetic H200", commit=req.revision[:12])
            write_run(req.out_dir / req.revision[:12] / "sm90", rows,
                      RunMeta(matrix=matrix, commit=req.revision[:12], arch="sm90",
                              environment=env))


@pytest.mark.parametrize("head_speed, exit_code", [("1.00", 0), ("1.05", 1)])
def test_two_matrices_share_one_ab_compare(tmp_path, head_speed, exit_code):
    """production and swiglu flagged in one job: one set of A/B benches (--matrix a,b),
    each matrix's record and verdicts its own."""
    from harness.engines.ab_step import ab_confirm

    repo, base_sha, head_sha = _repo(tmp_path, head_speed)
    env = Environment(arch="sm90", gpu_name="synthetic H200", commit=base_sha[:12])
    run_dir = tmp_path / "results" / head_sha[:12] / "sm90"
    for matrix in ("synthetic", "other"):
        base = [replace(r, matrix=matrix) for r in BASE]
        write_run(tmp_path / f"acc-{matrix}" / "sm90", base, RunMeta(
            matrix=matrix, commit=base_sha[:12], arch="sm90", environment=env,
            settings=S.to_dict()))
        assert main(["baseline", "accept", str(tmp_path / f"acc-{matrix}" / "sm90"),
                     "--root", str(tmp_path / "baselines"), "--yes"]) == 0
        cur = resample(base, 3, factor=SLOW)
        write_run(run_dir, cur, RunMeta(matrix=matrix, commit=head_sha[:12], arch="sm90",
                                        environment=replace(env, commit=head_sha[:12]),
                                        settings=S.to_dict()))
        write_gate_record(run_dir / f"{matrix}.csv", evaluate(cur, base, S))
    fake = TwoMatrices()
    stale = run_dir / "ab" / "synthetic+other" / "runs" / "round7" / "B.time.json"
    stale.parent.mkdir(parents=True)       # an earlier job's bench (--overwrite)
    stale.write_text('{"released": 0.0, "ready": 1.0, "ended": 50.0}')
    seconds: dict[str, float] = {}
    codes = ab_confirm(run_dir, ["synthetic", "other"], baselines=tmp_path / "baselines",
                       arch="sm90", settings=S, rounds=2, repo=repo, runner=fake,
                       echo=lambda s: None, seconds=seconds)
    assert codes == {"synthetic": exit_code, "other": exit_code}
    # the fake runner leaves no time records, and the earlier job's is not counted
    assert not stale.exists() and set(seconds) == {"A/B"}
    assert {c.matrix for c in fake.calls} == {"synthetic,other"}
    assert len(fake.calls) <= 2 * 2 + 2            # rounds x sides (+ one re-measure round)
    for matrix in ("synthetic", "other"):
        rec = stored_ab(read_meta(run_dir / f"{matrix}.json"))
        assert rec.matrix == matrix and rec.rows
        assert {r.verdict for r in rec.rows} == {"SAME" if exit_code == 0 else "SLOWER"}


# ------------------------------------------- a baseline whose rows come from two commits
def test_rows_group_by_their_baseline_rows_commit_spelled_either_way():
    from harness.engines.ab_pending import Pending, commit_groups, row_commit

    result = _gate()
    slow = [v for v in result.verdicts if v.path == "marlin_asym"]
    at = {v.key: ("e" * 40 if v.case_id.startswith("M1-") else "f" * 12) for v in slow}
    slow = [replace(v, baseline=replace(v.baseline, commit=at[v.key])) for v in slow]
    # the same commit in 12 and 40 digits is one group; git's null id falls back
    other = [replace(v, baseline=replace(v.baseline, commit=c))
             for v, c in zip(slow, ("e" * 12, "0" * 40, ""), strict=False)]
    groups = commit_groups({"a": Pending(result, "d" * 40, slow),
                            "b": Pending(result, "d" * 40, other)})
    assert {c: sorted((m, v.key) for m, v in g) for c, g in groups.items()} == {
        "e" * 40: sorted([("a", k) for k, c in at.items() if c == "e" * 40]
                         + [("b", other[0].key)]),
        "f" * 12: sorted(("a", k) for k, c in at.items() if c == "f" * 12),
        "d" * 40: sorted(("b", v.key) for v in other[1:]),
    }
    assert row_commit(other[1], "d" * 40) == "d" * 40


@pytest.mark.parametrize("head_speed, exit_code", [("1.00", 0), ("1.05", 1)])
def test_a_mixed_commit_baseline_gets_one_compare_each_commit_measuring_its_rows(
        tmp_path, capsys, head_speed, exit_code):
    """After `harness baseline accept --only-faster` the M1 rows of marlin_asym were
    measured at the faster commit (the baseline's environment) and the M16 rows at the
    older one: each row is A/B'd against its own row's commit, in one compare whose A
    side measures each commit's rows at that commit every round and whose B side
    measures all of them once a round (one pipeline: the foreign job's A/B on d2 of
    2026-12-05 ran two compares, 12 benches); the record says which commit each row was
    measured against, and report replays the same verdicts."""
    repo, base_sha, head_sha = _repo(tmp_path, head_speed)
    mid_sha = _git(repo, "commit-tree", f"{base_sha}^{{tree}}", "-p", base_sha, "-m", "mid")

    def measured_at(r):
        return mid_sha if r.case_id.startswith("M1-") and r.path == "marlin_asym" else base_sha
    mixed = [replace(r, commit=measured_at(r)[:12]) for r in BASE]
    run_dir = _stored(tmp_path, mid_sha, head_sha, baseline=mixed)
    fake = ThisMachine()
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=2, repo=repo, runner=fake,
                             echo=lambda s: None)
    assert code == exit_code
    flagged = {(r.case_id, r.path) for r in BASE if r.path == "marlin_asym"}
    want = {sha: tuple(sorted((r.case_id, r.path) for r in BASE
                              if r.path == "marlin_asym" and measured_at(r) == sha))
            for sha in (mid_sha, base_sha)}
    assert all(want.values()) and set(want[mid_sha]) | set(want[base_sha]) == flagged
    for sha in (mid_sha, base_sha):        # each baseline part measured its own rows only
        assert {c.rows for c in fake.calls if c.revision == sha} == {want[sha]}
        assert sum(c.revision == sha for c in fake.calls) == 2          # once a round
    heads = [c for c in fake.calls if c.revision == head_sha]
    assert len(heads) == 2 and {c.rows for c in heads} == {tuple(sorted(flagged))}
    assert len(fake.calls) == 6                  # 2 rounds x (2 parts of A + B)
    assert [p.name for p in (run_dir / "ab").iterdir()] == ["synthetic"]
    assert sorted(p.name for p in (run_dir / "ab" / "synthetic" / "runs" / "round0").iterdir()
                  if p.is_dir()) == sorted(["B", f"A@{mid_sha[:12]}", f"A@{base_sha[:12]}"])
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert rec.baseline_commit == mid_sha           # the baseline's own: replay finds it
    assert {r.key[0]: r.baseline_commit for r in rec.rows} == {
        case: ("" if sha == mid_sha else base_sha) for sha, rows in want.items()
        for case, _ in rows}
    assert {r.verdict for r in rec.rows} == {"SAME" if exit_code == 0 else "SLOWER"}
    assert ABRecord.from_dict(rec.to_dict()) == rec
    capsys.readouterr()
    assert main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == exit_code
    assert "verdicts agree with the bench's stored gate on all" in capsys.readouterr().out
    text = (tmp_path / "rep" / "report.csv").read_text()
    assert f"against {mid_sha[:12]}:" in text and f"against {base_sha[:12]}:" in text


def test_rows_of_a_baseline_commit_not_in_the_repository_keep_their_verdicts(tmp_path):
    """A baseline whose M1 marlin_asym rows name a commit this clone lacks: one line says
    so, those rows keep their stored SLOWER, the other commit's rows are still A/B'd
    (and cleared: this machine's offset)."""
    repo, base_sha, head_sha = _repo(tmp_path, "1.00")
    gone = "e" * 40

    def measured_at(r):
        return gone if r.case_id.startswith("M1-") and r.path == "marlin_asym" else base_sha
    mixed = [replace(r, commit=measured_at(r)[:12]) for r in BASE]
    run_dir = _stored(tmp_path, base_sha, head_sha, baseline=mixed)
    fake, said = ThisMachine(), []
    code = ab_confirm_matrix(run_dir, "synthetic", baselines=tmp_path / "baselines",
                             arch="sm90", settings=S, rounds=2, repo=repo, runner=fake,
                             echo=said.append)
    assert code == 1
    assert [line for line in said if gone[:12] in line and "not done" in line]
    assert {c.revision for c in fake.calls} == {base_sha, head_sha}
    rec = stored_ab(read_meta(run_dir / "synthetic.json"))
    assert {r.key[0].split("-")[0] for r in rec.rows} == {"M16"}
    assert {r.verdict for r in rec.rows} == {"SAME"}
    gate = read_meta(run_dir / "synthetic.json").extra["gate"]["verdicts"]
    assert {k for k, v in gate.items() if v == "SLOWER"} == {
        "|".join(r.key) for r in BASE if measured_at(r) == gone and r.status == "ok"}


def test_the_path_screen_reads_a_path_against_the_others_not_the_machine_offset():
    """Every path 1.5% slower (another machine of the model): no path moved against the
    others, and 1.5% is inside the row screen: nothing to A/B, where an absolute 1% path
    screen sent every gated row. One path 1.5% beyond the others: that path, whole."""
    paths = {r.path for r in BASE if r.status == "ok"}
    assert len(paths) >= 3
    everything = {r.key: 0.015 for r in BASE}
    assert screen_keys(_moved(everything), BASE, S) == set()
    assert screen_keys(_moved(everything), BASE, S, against_others=False) == {
        r.key for r in BASE if r.status == "ok" and r.role == "path"}
    asym = {r.key for r in BASE if r.path == "marlin_asym" and r.status == "ok"}
    one_more = {k: (0.03 if k in asym else 0.015) for k in everything}
    assert screen_keys(_moved(one_more), BASE, S) == asym
    moves = path_moves(evaluate(_moved(one_more), BASE, S, margins={}).verdicts)
    assert moves[("marlin_asym", "graph")] == pytest.approx(0.015, abs=1e-6)


def test_a_row_faster_than_a_baseline_from_another_machine_is_still_judged_by_its_ab():
    """A row this machine runs 8% faster than the stored baseline's reads FASTER on the
    cross-machine gate; a 3% slowdown there still reads FASTER. Its A/B against the
    baseline's commit on this machine reads SLOWER: that is its verdict (d2 of 2026-12-05:
    two planted fp16_cache rows stayed FASTER with an A/B reading of SLOWER)."""
    result = None
    for key in (r.key for r in BASE if r.status == "ok" and r.role == "path"):
        result = evaluate(_moved({key: 0.92 * 1.03 - 1}), BASE, S)
        [v] = [v for v in result.verdicts if v.key == key]
        if v.verdict == Verdict.FASTER:       # not a row whose winner it changes
            break
    assert v.verdict == Verdict.FASTER and not v.fails
    for ab, verdict, fails in (("SLOWER", Verdict.SLOWER, True),
                               ("SAME", Verdict.FASTER, False)):
        record = ABRecord("synthetic", "b" * 40, "c" * 40, 3, (ABRow(*key, ab, 0.03),))
        [got] = [g for g in apply_ab(result, record).verdicts if g.key == key]
        assert (got.verdict, got.fails) == (verdict, fails)
        assert "A/B" in got.reasons[-1]
