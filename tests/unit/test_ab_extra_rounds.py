"""The A/B's extra rounds for undecided rows (``harness compare`` on two revisions, as
``harness job`` runs it).

On the H200 the fp16_cache row M256-N2048-K8192 moves 3-6% between processes of one
build, so its margin from three rounds (one round's spread) was 3.3-6.7% and a planted 5%
slowdown read SAME there (docs/measurement.md §9.5). These tests put one such noisy row in
a fake bench, each process drawing its own offset, and check that the rows the first
rounds leave undecided get more interleaved rounds of those rows only, judged on the
standard error of the rounds' means: the 5% slowdown is then confirmed, the unchanged
build is not flagged, and a row that is decided after the first rounds costs nothing
more. The statistic itself is checked against a hand computation."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from speed_repos import git, speed_repo

from harness.config import load_settings
from harness.engines.ab_legs import matrices_of
from harness.engines.bench_runner import BenchRequest
from harness.engines.compare import compare
from harness.errors import CompareError
from harness.reports.stats import mean_difference_margins, mean_difference_se
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import Verdict
from harness.results.environment import Environment
from harness.results.store import RunMeta, load_run, write_run

ROOT = Path(__file__).resolve().parents[2]
S = load_settings("default")
BASE = make_rows(ms=(1, 16), seed=5, peers=())
NOISY = next(r.key for r in BASE if r.path == "fp16_cache" and r.M == 16)
#: per-process offsets of the noisy row, by side, in the order each side's benches run:
#: A's first three spread 6% (their margin, ~5.8%, and a pooled median 2% high hide a 5%
#: slowdown), the rest do not
OFFSETS = {"A": [1.00, 1.06, 1.02, 1.00, 0.99, 1.00, 1.005],
           "B": [1.00, 0.985, 1.01, 1.00, 1.01, 0.995, 1.00]}


@pytest.fixture()
def repo(tmp_path):
    """A base commit; each test adds HEAD, whose speed.txt says how much slower the noisy
    row is there."""
    return speed_repo(tmp_path / "repo", "1.00")


def _head(repo, speed: str) -> None:
    (repo / "speed.txt").write_text(speed + "\n")
    git(repo, "commit", "-qam", "b", "--allow-empty")


class NoisyBench:
    """Every row as BASE's model; the noisy row x the side's next process offset x the
    revision's speed. A request naming ``rows`` gets only those measured (the others
    ``unavailable``, as ``harness.engines.bench_rows`` records them)."""

    def __init__(self, offsets=None, also=None):
        self.calls: list[BenchRequest] = []
        self.seen = {"A": 0, "B": 0}
        self.offsets = offsets or OFFSETS
        #: (case_id, path) asked -> a row measured with it unasked (a SwiGLU pair's
        #: derived row comes with the row it derives from)
        self.also = also or {}

    def __call__(self, req: BenchRequest) -> None:
        self.calls.append(req)
        speed = float((req.worktree / "speed.txt").read_text())
        wanted = set(req.rows) | {self.also[r] for r in req.rows if r in self.also}
        offset = 1.0                 # the noisy row's offsets go to its own processes
        if not wanted or (NOISY[0], NOISY[1]) in wanted:
            offset = self.offsets[req.label][self.seen[req.label]]
            self.seen[req.label] += 1
        rows = resample(BASE, seed=len(self.calls), noise=0.002,
                        factor={NOISY: offset * speed})
        rows = [r if not wanted or (r.case_id, r.path) in wanted
                else replace(r, status="unavailable", error="not among the rows this A/B "
                             "re-measures", samples_us="", n_samples=0)
                for r in rows]
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=req.revision[:12])
        write_run(req.out_dir / req.revision[:12] / "sm90", rows,
                  RunMeta(matrix="synthetic", commit=req.revision[:12], arch="sm90",
                          environment=env))


def _compare(repo, tmp_path, settings=S, offsets=None):
    fake = NoisyBench(offsets)
    out = compare("HEAD~1", "HEAD", settings, work_dir=tmp_path / "cmp", repo=repo,
                  matrix="synthetic", rounds=3, runner=fake, confirm=False,
                  echo=lambda s: None)
    noisy = next(v for v in out.result.verdicts if v.key == NOISY)
    return fake, out, noisy


def test_a_5pct_slowdown_on_a_noisy_row_is_confirmed_by_extra_rounds(repo, tmp_path):
    _head(repo, "1.05")
    fake, out, noisy = _compare(repo, tmp_path, replace(S, ab_extra_rounds=0))
    # three rounds: the 5% reads +2.9% against a margin of ~5.8% (one round's spread)
    assert noisy.verdict == Verdict.SAME and S.ab_screen < noisy.time_change < 0.04
    assert noisy.threshold > 0.05

    fake, out, noisy = _compare(repo, tmp_path)
    assert noisy.verdict == Verdict.SLOWER and noisy.fails
    assert S.min_effect <= noisy.threshold < 0.045
    assert out.extended == {NOISY: 7}
    extra = fake.calls[6:]
    assert [c.out_dir.parent.name for c in extra] == [f"round{r}" for r in (3, 4, 5, 6)
                                                      for _ in range(2)]
    assert [c.label for c in extra] == ["B", "A", "A", "B", "B", "A", "A", "B"]
    assert all(c.rows == ((NOISY[0], NOISY[1]),) for c in extra)
    # every other row: judged on the first three rounds, none left unavailable by the
    # extra rounds' row selection
    others = [v for v in out.result.verdicts if v.key != NOISY]
    assert others and {v.verdict for v in others} == {Verdict.SAME}
    assert all(r.status == "ok" for r in out.b_rows)
    assert any("undecided row(s) measured in 7 rounds" in n for n in out.result.notes)


def test_the_same_build_stays_same_after_the_extra_rounds(repo, tmp_path):
    _head(repo, "1.00")
    fake, out, noisy = _compare(repo, tmp_path, offsets={
        "A": [1.00, 0.97, 1.00, 0.99, 1.00, 1.01, 1.00],
        "B": [1.03, 1.025, 1.00, 1.00, 0.99, 1.00, 1.00]})
    assert out.extended == {NOISY: 7}     # beyond 2% after three rounds, SAME: undecided
    assert noisy.verdict == Verdict.SAME and not noisy.fails and noisy.time_change < 0.03
    assert out.result.exit_code == 0


@pytest.mark.parametrize("decide", [True, False])
def test_an_unasked_row_the_bench_measured_anyway_gets_no_extra_round(repo, tmp_path,
                                                                      decide):
    """q4 of 2026-12-06 (an H100): the job's A/B asked for 14 native_int4 SwiGLU rows, the
    bench measured each pair's derived native_int4_fused row with them, and one of those,
    a close call that no verdict of the job reads, got four extra rounds. With ``decide``
    (the rows the caller reads) the extra rounds go to those alone; without it (``harness
    compare``), to any undecided row."""
    _head(repo, "1.00")
    asked = (NOISY[0], "marlin_asym")
    fake = NoisyBench({"A": [1.00, 0.97, 1.00, 0.99, 1.00, 1.01, 1.00],
                       "B": [1.03, 1.025, 1.00, 1.00, 0.99, 1.00, 1.00]},
                      also={asked: NOISY[:2]})
    out = compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "cmp", repo=repo,
                  matrix="synthetic", rounds=3, runner=fake, confirm=False,
                  echo=lambda s: None, rows=(asked,),
                  decide=[(*asked, "graph")] if decide else ())
    noisy = next(v for v in out.result.verdicts if v.key == NOISY)
    assert noisy.current.status == "ok" and noisy.verdict == Verdict.SAME
    if decide:      # measured, beyond the screen on three rounds: undecided, not asked
        assert out.extended == {} and len(fake.calls) == 6
        assert noisy.time_change > S.ab_screen
    else:
        assert out.extended == {NOISY: 7} and len(fake.calls) == 6 + 8


def test_rows_decided_by_the_first_rounds_get_no_extra_round(repo, tmp_path):
    _head(repo, "1.10")
    fake, out, noisy = _compare(repo, tmp_path)
    assert noisy.verdict == Verdict.SLOWER and out.extended == {}
    assert len(fake.calls) == 6


def test_a_slower_reading_within_the_standard_errors_of_min_effect_gets_extra_rounds(
        repo, tmp_path):
    """An unchanged build whose three A processes agree and whose B processes read +2.5%,
    +2.8% and +0.5% (n1 of 2026-12-06, an H100: marlin_asym M128-N8192-K2048 read SLOWER
    at +2.4%): the rounds disagree by as much as the call's distance from min_effect, so
    the row gets the extra rounds, which read it SAME. With ``ab_undecided_se`` 0 (the rule
    before) it stays the false alarm."""
    _head(repo, "1.00")
    offsets = {"A": [1.00, 1.001, 0.999, 1.00, 1.001, 0.999, 1.00],
               "B": [1.025, 1.028, 1.005, 1.00, 0.998, 1.002, 1.00]}
    fake, out, noisy = _compare(repo, tmp_path, replace(S, ab_undecided_se=0.0), offsets)
    assert noisy.verdict == Verdict.SLOWER and out.extended == {}
    fake, out, noisy = _compare(repo, tmp_path, offsets=offsets)
    assert out.extended == {NOISY: 7} and len(fake.calls) == 6 + 8
    assert noisy.verdict == Verdict.SAME and not noisy.fails and out.result.exit_code == 0


def test_a_3pct_slowdown_read_below_the_screen_by_three_rounds_is_confirmed(repo, tmp_path):
    """A 3% slowdown that three rounds read +1.1% (one slow A process: k1 of 2026-12-06,
    an H200, nine planted rows read -0.2..+2.1%): below ``ab_screen``, so the rule before
    left it SAME; within ``ab_undecided_se`` standard errors of min_effect, it gets the
    extra rounds and is confirmed SLOWER."""
    _head(repo, "1.03")
    offsets = {"A": [1.00, 1.03, 1.01, 1.00, 1.00, 1.005, 0.995],
               "B": [0.99, 1.00, 0.995, 1.00, 1.00, 1.005, 1.00]}
    fake, out, noisy = _compare(repo, tmp_path, replace(S, ab_undecided_se=0.0), offsets)
    assert noisy.verdict == Verdict.SAME and noisy.time_change < S.ab_screen
    assert out.extended == {}
    fake, out, noisy = _compare(repo, tmp_path, offsets=offsets)
    assert out.extended == {NOISY: 7}
    assert noisy.verdict == Verdict.SLOWER and noisy.fails and noisy.threshold == S.min_effect
    others = [v for v in out.result.verdicts if v.key != NOISY and v.current is not None]
    assert others and {v.verdict for v in others} == {Verdict.SAME}


@pytest.mark.parametrize("speed, offsets, first, then", [
    # a 3% slowdown whose seven rounds read it just under the 2% line (p4 and r3 of
    # 2026-12-06, H100s: three 2.8-2.96% plants each read +1.85..1.98% after seven rounds)
    ("1.03", {"A": [1.00, 1.01, 1.02, 1.00, 1.01, 1.02, 1.00, 1.00, 1.00, 0.995, 1.005],
              "B": [1.00, 0.995, 1.00, 1.00, 1.00, 0.995, 1.00, 1.00, 1.00, 1.005, 0.995]},
     Verdict.SAME, Verdict.SLOWER),
    # an unchanged build whose seven rounds read it just over the line (p1: +2.05%)
    ("1.00", {"A": [1.00, 0.99, 0.98, 1.00, 0.99, 0.985, 0.99, 1.00, 1.005, 1.00, 1.005],
              "B": [1.01, 1.02, 1.01, 1.015, 1.01, 1.01, 1.01, 1.00, 0.99, 0.995, 1.00]},
     Verdict.SLOWER, Verdict.SAME),
])
def test_a_row_still_at_the_line_after_seven_rounds_gets_more_with_ab_line_rounds(
        repo, tmp_path, speed, offsets, first, then):
    """``ab_line_rounds`` (off by default): a row whose change after the extra rounds is
    still within one standard error of ``min_effect`` gets that many more rounds, which
    take a 3% slowdown over the line and an unchanged build back under it."""
    _head(repo, speed)
    fake, out, noisy = _compare(repo, tmp_path, offsets=offsets)
    assert out.extended == {NOISY: 7} and len(fake.calls) == 6 + 8
    assert noisy.verdict == first and abs(noisy.time_change - S.min_effect) < 0.003
    fake, out, noisy = _compare(repo, tmp_path, replace(S, ab_line_rounds=4), offsets)
    assert out.extended == {NOISY: 11} and len(fake.calls) == 6 + 8 + 8
    assert [c.out_dir.parent.name for c in fake.calls[14:]] == [
        f"round{r}" for r in (7, 8, 9, 10) for _ in range(2)]
    assert noisy.verdict == then
    assert any("undecided row(s) measured in 11 rounds" in n for n in out.result.notes)


def test_the_extra_rounds_run_the_first_rounds_selection_on_their_rows(repo, tmp_path):
    """A compare of two matrices whose undecided rows are all of one: each extra round's
    bench runs the command its leg ran in the first rounds (both matrices, the same case
    filter, paths and modes), restricted to the undecided rows by its row file. A bench
    named by its rows' own filter could name a matrix that filter selects no case of
    (n3 of 2026-12-06: exit 2, the regression's rows unjudged); a command the first rounds
    ran cannot, and it can be started before the rows are known."""
    _head(repo, "1.05")
    fake = NoisyBench()
    out = compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "cmp", repo=repo,
                  matrix="synthetic,other", rounds=3, runner=fake, confirm=False,
                  echo=lambda s: None)
    assert out.extended == {NOISY: 7}

    def command(c):
        return c.label, c.matrix, c.filter, c.paths, c.modes, c.plugins
    assert {command(c) for c in fake.calls[6:]} == {command(c) for c in fake.calls[:6]}
    assert {c.matrix for c in fake.calls} == {"synthetic,other"}
    assert {c.rows for c in fake.calls[6:]} == {((NOISY[0], NOISY[1]),)}
    rows = [r for r in BASE if r.key == NOISY]
    assert matrices_of("other,synthetic", rows) == "synthetic"
    assert matrices_of("production", rows) == "production"     # not among them: all kept


def test_the_standard_error_is_the_pooled_one_of_the_log_round_medians():
    a = [{("c", "p", "graph"): m} for m in (10.0, 10.4, 9.9)]
    b = [{("c", "p", "graph"): m} for m in (10.5, 10.3, 10.6, 10.2)]
    se, df = mean_difference_se(a, b)[("c", "p", "graph")]
    la, lb = np.log([10.0, 10.4, 9.9]), np.log([10.5, 10.3, 10.6, 10.2])
    s = math.sqrt((((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()) / 5)
    assert df == 5 and se == pytest.approx(s * math.sqrt(1 / 3 + 1 / 4), rel=1e-12)
    assert mean_difference_se(a[:1], b) == {}


def test_the_margin_is_t_times_the_standard_error_of_the_difference_of_means():
    a = [{("c", "p", "graph"): m} for m in (10.0, 10.4, 9.9, 10.1)]
    b = [{("c", "p", "graph"): m} for m in (10.5, 10.3, 10.6)]
    got = mean_difference_margins(a, b, alpha=0.01, floor=0.0)[("c", "p", "graph")]
    la, lb = np.log([10.0, 10.4, 9.9, 10.1]), np.log([10.5, 10.3, 10.6])
    s = math.sqrt((((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()) / 5)
    want = math.expm1(sps.t.ppf(0.99, 5) * s * math.sqrt(1 / 4 + 1 / 3))
    assert got == pytest.approx(want, rel=1e-12)
    # more rounds of the same spread: a smaller margin; the floor holds; one run: none
    more = mean_difference_margins(a * 3, b * 4, alpha=0.01, floor=0.0)[("c", "p", "graph")]
    assert more < got
    assert mean_difference_margins(a, b, 0.01, floor=0.5)[("c", "p", "graph")] == 0.5
    assert mean_difference_margins(a[:1], b, 0.01, floor=0.0) == {}


def test_the_acceptance_summary_lists_the_rows_judged_on_extra_rounds(tmp_path):
    """scripts/acceptance_summary.py names each row an A/B judged on more rounds, with its
    reading and threshold (a null threshold, NaN stored, reads n/a)."""
    run = tmp_path / "sm90"
    run.mkdir()
    gate = {"verdicts": {"c0|fp16_cache|graph": "SLOWER", "c1|fp16_cache|graph": "SLOWER"},
            "failing": {"SLOWER": 2}, "exit_code": 1}
    rows = {"c0|fp16_cache|graph": {"verdict": "SLOWER", "change": 0.052, "threshold": 0.03},
            "c1|fp16_cache|graph": {"verdict": "SLOWER", "change": 0.047, "threshold": None,
                                    "rounds": 7}}
    ab = {"version": 3, "matrix": "production", "baseline_commit": "a" * 40,
          "current_commit": "b" * 40, "rounds": 3, "rows": rows}
    (run / "production.json").write_text(json.dumps({"extra": {"gate": gate,
                                                                "ab_confirm": ab}}))
    said = subprocess.run([sys.executable, str(ROOT / "scripts" / "acceptance_summary.py"),
                           str(run), "--plant", "fp16_cache"], capture_output=True, text=True,
                          check=True).stdout
    assert "A/B (3 rounds vs aaaaaaaaaaaa): {'SLOWER': 2}" in said
    assert "extra rounds: c1|fp16_cache|graph SLOWER +4.70% (threshold n/a, 7 rounds)" in said
    assert "no A/B reading" not in said
    assert "c0|fp16_cache|graph SLOWER" not in said
    assert "2/2 SLOWER (100.0%)" in said
    # a row screened on another GPU model whose A/B gave no reading is named as such
    rows["c0|fp16_cache|graph"]["source"] = "screened"
    (run / "production.json").write_text(json.dumps({"extra": {"gate": gate,
                                                                "ab_confirm": ab}}))
    said = subprocess.run([sys.executable, str(ROOT / "scripts" / "acceptance_summary.py"),
                           str(run)], capture_output=True, text=True, check=True).stdout
    assert "no A/B reading, the screen's verdict stands: c0|fp16_cache|graph SLOWER +5.20%" \
        in said


def test_a_side_in_parts_gets_its_extra_rounds_where_the_undecided_row_is(repo, tmp_path):
    """A baseline of two commits (``ab_legs.APart``): each part measures its own rows every
    round, B all of them; the noisy row's 5% slowdown, left undecided by three rounds,
    gets its extra rounds from its own part and B only, and is confirmed."""
    from harness.engines.ab_legs import APart
    base = git(repo, "rev-parse", "HEAD")
    mid = git(repo, "commit-tree", f"{base}^{{tree}}", "-p", base, "-m", "mid")
    _head(repo, "1.05")
    gated = [r for r in BASE if r.status == "ok" and r.role == "path"]
    mine = [r for r in gated if r.path == NOISY[1]]
    rest = [r for r in gated if r.path != NOISY[1]]

    def part(sha, rows):
        return APart(sha, frozenset(r.key for r in rows), None,
                     tuple(sorted({r.path for r in rows})), ("graph",),
                     tuple(sorted((r.case_id, r.path) for r in rows)))
    fake = NoisyBench()
    out = compare(base, "HEAD", S, work_dir=tmp_path / "cmp", repo=repo, matrix="synthetic",
                  rounds=3, runner=fake, confirm=False, echo=lambda s: None,
                  rows=tuple(sorted((r.case_id, r.path) for r in gated)),
                  a_parts=[part(base, rest), part(mid, mine)])
    noisy = next(v for v in out.result.verdicts if v.key == NOISY)
    assert noisy.verdict == Verdict.SLOWER and out.extended == {NOISY: 7}
    assert [c.revision for c in fake.calls[:3]] == [base, mid, git(repo, "rev-parse", "HEAD")]
    extra = fake.calls[9:]
    assert len(fake.calls) == 9 + 8 and {c.revision for c in extra if c.label == "A"} == {mid}
    assert all(c.rows == ((NOISY[0], NOISY[1]),) for c in extra)
    # every row judged, each A row from its own part
    assert {v.key for v in out.result.verdicts if v.current is not None} >= {r.key for r in gated}
    assert {r.key for r in out.a_rows if r.status == "ok"} == {r.key for r in gated}
    others = [v for v in out.result.verdicts if v.key != NOISY and v.current is not None]
    assert {v.verdict for v in others} == {Verdict.SAME}


def test_a_seeded_compare_counts_its_seeds_as_round_0_of_each_side(repo, tmp_path):
    """Readings taken before the compare (the job's on another GPU model: the machine
    factor's, the bench's own) are round 0: rounds 1 and 2 measured, the pooled rows and
    the margins over all three; a seed that is not a slowdown cannot hide one measured in
    the other rounds, and a bad seed request is one line."""
    _head(repo, "1.10")
    seed_a = resample(BASE, seed=91, noise=0.002)
    seed_b = resample(BASE, seed=92, noise=0.002, factor={NOISY: 1.10})
    fake = NoisyBench()
    out = compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "cmp", repo=repo,
                  matrix="synthetic", rounds=3, runner=fake, confirm=False,
                  echo=lambda s: None, seeds={"A": seed_a, "B": seed_b})
    assert sorted((c.label, c.out_dir.parent.name) for c in fake.calls) == [
        ("A", "round1"), ("A", "round2"), ("B", "round1"), ("B", "round2")]
    noisy = next(v for v in out.result.verdicts if v.key == NOISY)
    assert noisy.verdict == Verdict.SLOWER and noisy.time_change > 0.07
    pooled = next(r for r in out.b_rows if r.key == NOISY)
    measured = sum(r.n_samples for c in fake.calls if c.label == "B"
                   for r in load_run(c.out_dir).rows if r.key == NOISY)
    assert pooled.n_samples == measured + next(r.n_samples for r in seed_b if r.key == NOISY)
    assert any("round 0 of each the readings taken before the A/B" in n
               for n in out.result.notes)
    for bad in ({"A": seed_a}, {"A": seed_a, "B": seed_b, "C": seed_b}):
        with pytest.raises(CompareError, match="seeded rounds need both sides"):
            compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "bad", repo=repo,
                    matrix="synthetic", rounds=3, runner=fake, confirm=False,
                    echo=lambda s: None, seeds=bad)


class _Handle:
    """A started bench of ``NoisyHeld``: its request, rows filled in later if it was late."""

    def __init__(self, req: BenchRequest) -> None:
        self.req = req


class NoisyHeld(NoisyBench):
    """``NoisyBench`` as a pipelining runner that can start a bench before its rows are
    known (``start`` / ``release`` / ``finish`` / ``abort`` / ``fill``, as the subprocess
    runner has), recording (event, round/leg) in order."""

    def __init__(self, offsets=None):
        super().__init__(offsets)
        self.events: list[tuple[str, str]] = []

    def _note(self, event: str, h: _Handle) -> None:
        self.events.append((event, f"{h.req.out_dir.parent.name}/{h.req.out_dir.name}"))

    def start(self, req):
        h = _Handle(req)
        self._note("start", h)
        req.out_dir.mkdir(parents=True, exist_ok=True)     # as the subprocess runner does
        (req.out_dir / ".started").touch()
        return h

    def fill(self, h, rows):
        assert h.req.late and not h.req.rows
        h.req = replace(h.req, rows=tuple(rows), late=False)
        self._note("fill", h)

    def release(self, h):
        self._note("release", h)

    def finish(self, h):
        assert not h.req.late, "a bench measured before it was given its rows"
        assert (h.req.out_dir / ".started").exists(), "its folder was removed while it waited"
        self._note("finish", h)
        self(h.req)

    def abort(self, h):
        self._note("abort", h)


def test_the_extra_rounds_first_benches_start_in_the_last_rounds_shadows(repo, tmp_path):
    """The benches the extra rounds open with (round 3: B, then A) start during round 2,
    in the places the last benches' shadows took, without rows; the undecided row is
    given to them when round 2 is judged, so the extra rounds wait for no start-up (y1 of
    2026-12-07, an H100: round 3's B bench waited 4.4 s for its process). The verdicts
    and every bench's command and rows are those of the runner without it."""
    _head(repo, "1.05")
    plain, out_plain, noisy_plain = _compare(repo, tmp_path / "plain")
    fake = NoisyHeld()
    out = compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "cmp", repo=repo,
                  matrix="synthetic", rounds=3, runner=fake, confirm=False,
                  echo=lambda s: None)
    noisy = next(v for v in out.result.verdicts if v.key == NOISY)
    assert out.extended == out_plain.extended == {NOISY: 7}
    assert (noisy.verdict, noisy.time_change) == (noisy_plain.verdict, noisy_plain.time_change)

    def command(c):
        return c.label, c.round, c.matrix, c.filter, c.paths, c.modes, c.rows
    assert [command(c) for c in fake.calls] == [command(c) for c in plain.calls]
    ev = fake.events
    last_main = ev.index(("finish", "round2/B"))     # started while round 2 measured
    assert ev.index(("start", "round3/B")) < last_main
    assert ev.index(("start", "round3/A")) < last_main
    assert ("fill", "round3/B") in ev and ("fill", "round3/A") in ev
    starts = [n for e, n in ev if e == "start"]
    assert starts.count("round3/B") == starts.count("round3/A") == 1
    assert not [n for n in starts[:starts.index("round3/B")] if "shadow" in n]
    # every bench started is measured or killed, once
    ended = [n for e, n in ev if e in ("finish", "abort")]
    assert sorted(starts) == sorted(ended)


def test_without_an_undecided_row_the_held_benches_are_killed_unused(repo, tmp_path):
    _head(repo, "1.00")
    fake = NoisyHeld(offsets={"A": [1.0] * 7, "B": [1.0] * 7})
    out = compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "cmp", repo=repo,
                  matrix="synthetic", rounds=3, runner=fake, confirm=False,
                  echo=lambda s: None)
    assert out.extended == {} and len(fake.calls) == 6
    assert ("abort", "round3/B") in fake.events and ("abort", "round3/A") in fake.events
    assert "fill" not in {e for e, _ in fake.events}
    starts = [n for e, n in fake.events if e == "start"]
    assert sorted(starts) == sorted(n for e, n in fake.events if e in ("finish", "abort"))
