"""The same-model job's A/B starts its benches before the ppl step and measures after it:
``Confirmation.start`` runs the A/B in a thread whose benches start up and wait
(``pipeline.HeldRunner``) until ``finish``; leaving without ``finish`` kills them. The
A/B bench is a fake pipelining runner in a real git repository (``test_ab_confirm``'s)."""

from __future__ import annotations

import threading
import time

from harness.engines.ab_step import Confirmation
from harness.engines.revisions import BenchRequest
from harness.reports.ab_confirm import stored_ab
from harness.results.store import read_meta
from tests.unit.test_ab_confirm import S, ThisMachine, _repo, _stored


class Pipelined(ThisMachine):
    """``ThisMachine`` with ``start`` / ``release`` / ``finish`` / ``abort``: what happens
    is recorded as (event, round folder, label); a bench measures in ``finish``."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def _note(self, what: str, req: BenchRequest) -> None:
        with self.lock:
            self.events.append((what, req.out_dir.parent.name, req.label))

    def start(self, req: BenchRequest) -> BenchRequest:
        self._note("start", req)
        return req

    def release(self, req: BenchRequest) -> None:
        self._note("release", req)

    def finish(self, req: BenchRequest) -> None:
        self._note("finish", req)
        self(req)

    def abort(self, req: BenchRequest) -> None:
        self._note("abort", req)

    def seen(self, what: str) -> list:
        with self.lock:
            return [e for e in self.events if e[0] == what]


def _wait_for(cond, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _started(tmp_path) -> tuple[Confirmation, Pipelined, list[str]]:
    """A Confirmation of a 5% marlin_asym slowdown, started: its first benches are up."""
    repo, base_sha, head_sha = _repo(tmp_path, "1.05")
    run_dir = _stored(tmp_path, base_sha, head_sha)
    said: list[str] = []
    fake = Pipelined()
    conf = Confirmation(run_dir, ["synthetic"], baselines=tmp_path / "baselines", arch="sm90",
                        settings=S, rounds=2, repo=repo, runner=fake, echo=said.append)
    conf.start()
    _wait_for(lambda: len(fake.seen("start")) >= 2)
    return conf, fake, said


def test_the_ab_benches_start_during_the_ppl_step_and_measure_after_it(tmp_path):
    conf, fake, said = _started(tmp_path)
    with conf:
        time.sleep(0.2)                                 # the "ppl step": nothing measures
        primed = len(fake.seen("start"))
        assert fake.seen("release") == [] and fake.calls == []
        assert not any(line.startswith("compare:") for line in said)   # its lines wait too
        codes = conf.finish()
    assert codes == {"synthetic": 1}                    # the real 5% slowdown kept
    first_release = fake.events.index(fake.seen("release")[0])
    assert [e[0] for e in fake.events[:first_release]] == ["start"] * primed
    assert len(fake.seen("finish")) == len(fake.calls) == 4        # two rounds a side
    # each bench started once (the finishing step did not redo the A/B), plus one shadow
    # per release after the last request was started
    assert len(fake.seen("start")) == len(fake.calls) + primed
    assert any(line.startswith("compare:") for line in said)
    rec = stored_ab(read_meta(conf.run_dir / "synthetic.json"))
    assert {r.verdict for r in rec.rows} == {"SLOWER"}


def test_a_job_that_stops_before_its_ab_kills_the_started_benches(tmp_path):
    conf, fake, said = _started(tmp_path)
    with conf:
        pass                                            # the ppl step failed: no finish()
    assert fake.seen("release") == [] and fake.calls == []
    assert any("not done" in line and "the job stopped before its A/B measured" in line
               for line in said)
    assert len(fake.seen("abort")) == len(fake.seen("start")) >= 2
    assert stored_ab(read_meta(conf.run_dir / "synthetic.json")) is None
