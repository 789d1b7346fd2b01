"""The foreign job's A/B benches started while the machine factor measures
(``engines.prestart``): a bench started without rows measures exactly the rows it is
given later; a held bench serves the request that differs from it only in rows and
worktree; ``harness job`` on another model hands its A/B's round 0 to the benches it
started before the factor measured, with one selection for every bench, and kills the
held ones nobody asked for. The verdicts are those of the A/B without them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from test_foreign_model import Pipelining, S, _gated, _repo, _stored

from harness.cases.matrices import smoke as smoke_matrix
from harness.engines import bench_rows
from harness.engines.ab_step import Confirmation
from harness.engines.bench_runner import BenchRequest, SubprocessRunner
from harness.engines.pipeline import fit_key as key
from harness.engines.prestart import Prestarted, ab_round0
from harness.errors import CompareError

ROOT = Path(__file__).resolve().parents[2]
TIMER = "tests/planted/fake_timer_plugin.py"


def test_a_bench_started_without_rows_measures_the_rows_it_is_given_later(tmp_path):
    """A real CPU bench of the smoke matrix, started late (no case filter, no rows), its
    results folder removed meanwhile (``compare`` empties every bench's folder before its
    rounds): given three rows, it measures those three and leaves out every other."""
    smoke = sorted(c.id for c in smoke_matrix() if not c.id.startswith("swiglu_pair"))
    wanted = ((smoke[0], "fp16_cache"), (smoke[1], "fp16_cache"), (smoke[2], "native_int4"))
    runner = SubprocessRunner()
    req = BenchRequest("B", "HEAD", ROOT, tmp_path / "B", "smoke", 0,
                       paths=("fp16_cache", "native_int4"), plugins=(TIMER,), late=True)
    handle = runner.start(req)
    try:
        assert not (tmp_path / "B.rows.json").exists()
        shutil.rmtree(tmp_path / "B")
        runner.fill(handle, wanted)
        with pytest.raises(CompareError, match="already has its rows"):
            runner.fill(handle, wanted)
        runner.finish(handle)
    finally:
        runner.abort(handle)
        runner.reap()
    assert json.loads((tmp_path / "B.rows.json").read_text()) == sorted(map(list, wanted))
    [csv] = (tmp_path / "B").glob("*/*/smoke.csv")
    got = pd.read_csv(csv)
    # (a SwiGLU pair's fused native row comes with native_int4, as in any A/B bench)
    measured = got[(got.status == "ok") & (got.path != "native_int4_fused")]
    assert set(zip(measured.case_id, measured.path, strict=True)) == set(wanted)
    rest = got[got.status != "ok"]
    assert (rest.error == bench_rows.LEFT_OUT).all()
    assert json.loads((tmp_path / "B.time.json").read_text())["rows"] == 3


def test_a_late_bench_must_wait_at_a_gate(tmp_path):
    req = BenchRequest("B", "HEAD", ROOT, tmp_path / "B", "smoke", 0, late=True)
    with pytest.raises(CompareError, match="must wait at a gate"):
        SubprocessRunner()(req)


class Filling(Pipelining):
    """``Pipelining`` with ``fill``: a held bench (a request, started ``late``) given rows."""

    def fill(self, handle, rows):
        self.events.append(("fill", self._name(handle)))


def test_a_held_bench_serves_the_request_that_differs_only_in_rows_and_worktree(tmp_path):
    repo, base_sha, head_sha = _repo(tmp_path, {})
    fake = Filling()
    [a, b] = ab_round0(tmp_path / "ab" / "m", "m", [base_sha], head_sha, paths=("p",),
                       modes=("graph",))
    assert (a.label, a.out_dir.name, b.label, b.out_dir.name) == ("A", "A", "B", "B")
    with Prestarted(fake, repo) as pre:
        pre.prestart(b)
        asked = replace(b, worktree=tmp_path / "elsewhere", rows=(("c", "p"),))
        other = replace(asked, paths=("p", "q"))
        assert key(asked) == key(b) != key(other)
        assert pre.start(other) is other                 # no held bench of that command
        held = pre.start(asked)
        assert held.late and held.worktree.name.startswith("wt-")   # the held one
        assert pre.start(asked) is asked                 # ... taken once
        pre.prestart(a)
    assert [e for e, _ in fake.events] == ["start", "start", "fill", "start", "start",
                                           "abort"]
    assert pre.taken == 1


@pytest.mark.parametrize("slow, exit_code", [({}, 0), ({"fp16_cache": 1.05}, 1)])
def test_the_foreign_ab_takes_its_round_0_from_the_benches_started_before_the_factor(
        tmp_path, slow, exit_code):
    """The A/B's round-0 benches start before the factor's benches are released, and are
    handed their rows after the screen; every A/B bench runs one selection (no case
    filter); the verdicts are the usual ones (a 5% fp16_cache slowdown fails that path and
    no other); nothing is left held."""
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    fake = Filling()
    with Confirmation(run_dir, ["synthetic"], baselines=tmp_path / "baselines", arch="sm90",
                      settings=S, rounds=3, repo=repo, runner=fake,
                      echo=lambda s: None) as conf:
        conf.start()
        codes = conf.finish()
    assert codes == {"synthetic": exit_code}
    first_release = next(i for i, (e, _) in enumerate(fake.events) if e == "release")
    # prestarted: round 0 of A and B, started before the factor's first bench measured
    early = {n for e, n in fake.events[:first_release] if e == "start"}
    assert {"round0/A", "round0/B"} <= early
    ab = [c for c in fake.calls if c.out_dir.parent.name != "projection"]
    if not ab:                 # nothing screened: the held benches are killed, unused
        assert not slow and ("abort", "round0/A") in fake.events
        assert ("abort", "round0/B") in fake.events and "fill" not in {e for e, _ in fake.events}
        return
    assert ("abort", "round0/A") not in fake.events and ("abort", "round0/B") not in fake.events
    if not slow:
        return
    assert sorted((c.label, c.round) for c in ab) == [(s, r) for s in "AB" for r in range(3)]
    assert {c.filter for c in ab} == {None} and {c.matrix for c in ab} == {"synthetic"}
    # one set of worktrees: the compare measures in the held benches' (no second checkout)
    assert {c.worktree.parent.name.startswith("harness-prestart-") for c in ab} == {True}
    assert ("fill", "round0/A") in fake.events and ("fill", "round0/B") in fake.events
    assert [n for e, n in fake.events if e == "start"].count("round0/B") == 1
    verdicts = _gated(run_dir)
    mine = [v for k, v in verdicts.items() if k[1] == "fp16_cache"]
    assert sum(v == "SLOWER" for v in mine) >= 0.95 * len(mine)
    assert "SLOWER" not in {v for k, v in verdicts.items() if k[1] != "fp16_cache"}


def test_with_the_screens_readings_as_round_0_nothing_is_started_early(tmp_path):
    """``ab_screen_round`` 1: round 0 of each side is the readings taken before the A/B,
    so no bench of round 0 is started; rounds 1 and 2 start as usual."""
    slow = {"fp16_cache": 1.05}
    repo, base_sha, head_sha = _repo(tmp_path, slow)
    run_dir, _ = _stored(tmp_path, base_sha, head_sha, slow)
    fake = Filling()
    with Confirmation(run_dir, ["synthetic"], baselines=tmp_path / "baselines", arch="sm90",
                      settings=replace(S, ab_screen_round=1), rounds=3, repo=repo,
                      runner=fake, echo=lambda s: None) as conf:
        conf.start()
        assert conf.finish() == {"synthetic": 1}
    assert not [n for _, n in fake.events if n.startswith("round0/")]
    assert "fill" not in {e for e, _ in fake.events}
