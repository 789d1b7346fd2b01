"""``bench_runner``: pipelined benches measure one at a time, the next one started and held
at its gate meanwhile; a failure kills the held one; plain callables still run in order;
the gate plugin waits for its file, and gives up in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.engines import bench_runner, pipeline
from harness.engines.bench_runner import (
    GATE_ENV,
    GATE_PLUGIN,
    BenchRequest,
    SubprocessRunner,
    bench_timeline,
    with_requests,
)
from harness.engines.pipeline import Pipeline, run_pipelined
from harness.errors import CompareError


def _reqs(n: int) -> list[BenchRequest]:
    return [BenchRequest("AB"[i % 2], f"rev{i}", Path("."), Path(f"out{i}"), "smoke", i // 2)
            for i in range(n)]


class Recorder:
    """A pipelining runner that records what happens, and fails request ``fail``."""

    def __init__(self, fail: int | None = None) -> None:
        self.events: list[tuple[str, int]] = []
        self.fail = fail

    def __call__(self, req):
        self.events.append(("call", req.round))

    def start(self, req):
        # the k-th shadow of request i is 100 * k + i (".shadow", ".shadow2", ...)
        tail = req.out_dir.name.partition(".shadow")
        k = (int(tail[2] or 1) if tail[1] else 0)
        i = int(req.revision[3:]) + 100 * k
        self.events.append(("start", i))
        return i

    def release(self, i):
        self.events.append(("release", i))

    def finish(self, i):
        self.events.append(("finish", i))
        if i == self.fail:
            raise CompareError(f"bench {i} failed")

    def abort(self, i):
        self.events.append(("abort", i))


def _one_released_at_a_time(events) -> None:
    """Never two released and unfinished: bench i+1 is released only after i finished."""
    open_ = set()
    for what, i in events:
        if what == "release":
            open_.add(i)
            assert len(open_) == 1, events
        elif what == "finish":
            open_.discard(i)


def test_one_measures_at_a_time_and_the_next_starts_meanwhile():
    rec, seen = Recorder(), []
    run_pipelined(rec, _reqs(4), on_start=lambda i: seen.append(("measure", i)),
                  on_done=lambda i: seen.append(("done", i)), ahead=1)
    assert rec.events == [("start", 0), ("release", 0), ("start", 1), ("finish", 0),
                          ("release", 1), ("start", 2), ("finish", 1),
                          ("release", 2), ("start", 3), ("finish", 2),
                          ("release", 3), ("start", 103), ("finish", 3), ("abort", 103)]
    # every bench measured while another one started: the last beside its shadow (103),
    # which is stopped at its gate and never released
    assert seen == [("measure", 0), ("done", 0), ("measure", 1), ("done", 1),
                    ("measure", 2), ("done", 2), ("measure", 3), ("done", 3)]
    _one_released_at_a_time(rec.events)


def test_two_ahead_start_two_benches_behind_the_measuring_one():
    """The default: while bench i measures, i+1 (started earlier, held) and i+2 (starting);
    the last two measure beside the last one's shadows, both stopped at their gates."""
    rec = Recorder()
    run_pipelined(rec, _reqs(3))
    assert rec.events == [("start", 0), ("start", 1),
                          ("release", 0), ("start", 2), ("finish", 0),
                          ("release", 1), ("start", 102), ("finish", 1),
                          ("release", 2), ("start", 202), ("finish", 2),
                          ("abort", 102), ("abort", 202)]
    _one_released_at_a_time(rec.events)
    one = Recorder()
    run_pipelined(one, _reqs(1))
    assert one.events == [("start", 0), ("start", 100), ("release", 0), ("start", 200),
                          ("finish", 0), ("abort", 100), ("abort", 200)]


def test_a_primed_pipeline_starts_its_benches_before_it_runs_them():
    """``Pipeline.prime`` starts the first benches, held at their gates, while the caller
    does other work (the job's ppl step); ``run`` then measures as ``run_pipelined``
    does, and a pipeline left unrun kills what it holds."""
    rec = Recorder()
    with Pipeline(rec, _reqs(3)) as pipe:
        pipe.prime()
        assert rec.events == [("start", 0), ("start", 1)]
        rec.events.append(("elsewhere", -1))
        pipe.prime()                                           # once only
        pipe.run()
    after = rec.events[rec.events.index(("elsewhere", -1)) + 1:]
    assert after == [("release", 0), ("start", 2), ("finish", 0),
                     ("release", 1), ("start", 102), ("finish", 1),
                     ("release", 2), ("start", 202), ("finish", 2),
                     ("abort", 102), ("abort", 202)]
    left = Recorder()
    with Pipeline(left, _reqs(3)) as pipe:
        pipe.prime()
    assert left.events == [("start", 0), ("start", 1), ("abort", 0), ("abort", 1)]
    plain: list[str] = []
    pipe = Pipeline(lambda req: plain.append(req.revision), _reqs(2)).prime()
    assert plain == []                         # a plain callable primes nothing
    pipe.run()
    assert plain == ["rev0", "rev1"]


def test_a_failure_kills_the_benches_held_at_their_gates():
    rec = Recorder(fail=1)
    with pytest.raises(CompareError, match="bench 1 failed"):
        run_pipelined(rec, _reqs(4), ahead=1)
    assert rec.events[-2:] == [("finish", 1), ("abort", 2)]
    assert ("release", 2) not in rec.events
    rec = Recorder(fail=3)                                      # the last one: its shadow
    with pytest.raises(CompareError, match="bench 3 failed"):
        run_pipelined(rec, _reqs(4), ahead=1)
    assert rec.events[-2:] == [("finish", 3), ("abort", 103)]
    rec = Recorder(fail=1)                                      # two held: both go
    with pytest.raises(CompareError, match="bench 1 failed"):
        run_pipelined(rec, _reqs(4))
    assert rec.events[-3:] == [("finish", 1), ("abort", 2), ("abort", 3)]
    assert not {("release", 2), ("release", 3)} & set(rec.events)


def test_plain_callables_run_in_order_and_mapping_keeps_pipelining():
    calls = []
    run_pipelined(lambda req: calls.append(req.revision), _reqs(3))
    assert calls == ["rev0", "rev1", "rev2"]
    rec = Recorder()
    mapped = with_requests(rec, lambda req: BenchRequest(req.label, req.revision, req.worktree,
                                                         req.out_dir, req.matrix, 7))
    assert hasattr(mapped, "start")
    run_pipelined(mapped, _reqs(2))
    assert rec.events[0] == ("start", 0) and ("finish", 1) in rec.events
    assert rec.events[-2:] == [("abort", 101), ("abort", 201)]
    mapped(_reqs(1)[0])
    assert rec.events[-1] == ("call", 7)                       # fn applied to a plain call
    assert not hasattr(with_requests(lambda req: None, lambda r: r), "start")


def _gate_process(gate: Path, timeout: str) -> subprocess.Popen:
    env = dict(os.environ, **{GATE_ENV: str(gate), "HARNESS_BENCH_GATE_TIMEOUT": timeout})
    code = (f"import runpy; runpy.run_path({str(GATE_PLUGIN)!r}); print('through', flush=True)")
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_gate_plugin_holds_until_its_file_exists(tmp_path):
    gate = tmp_path / "gate"
    proc = _gate_process(gate, "60")
    time.sleep(0.5)
    assert proc.poll() is None                                 # held
    reached = float(Path(f"{gate}.ready").read_text())         # when it reached its gate
    assert time.time() - 30 < reached <= time.time()
    gate.touch()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "through", err


def test_the_gate_plugin_gives_up_in_one_line(tmp_path):
    proc = _gate_process(tmp_path / "never", "0.3")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and out == ""
    assert err.strip().splitlines() == [
        f"harness bench: gate {tmp_path / 'never'} was not opened within 0.3 s"]


def test_without_the_variable_the_gate_plugin_does_nothing():
    env = {k: v for k, v in os.environ.items() if k != GATE_ENV}
    code = f"import runpy; runpy.run_path({str(GATE_PLUGIN)!r}); print('through')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out.strip() == "through"


def _fake_bench(monkeypatch, start_s: float, measure_s: float, exit_s: float = 0.0) -> None:
    """Benches that take ``start_s`` to reach the gate plugin, ``measure_s`` after it (then
    write a results file into their ``out_dir``) and ``exit_s`` to exit after their
    ``atexit`` (registered first, so it runs after the gate plugin's: a teardown after the
    results are written)."""
    def command(req):
        out = req.out_dir.resolve() / "results.csv"
        code = (f"import atexit, pathlib, runpy, time; atexit.register(time.sleep, {exit_s}); "
                f"time.sleep({start_s}); runpy.run_path({str(GATE_PLUGIN)!r}); "
                f"time.sleep({measure_s}); pathlib.Path({str(out)!r}).write_text('x')")
        return [sys.executable, "-c", code]
    monkeypatch.setattr(bench_runner, "bench_command", command)


def test_each_bench_leaves_its_start_up_and_measuring_times(monkeypatch, tmp_path):
    _fake_bench(monkeypatch, start_s=0.8, measure_s=0.8, exit_s=0.3)
    runner = SubprocessRunner()
    reqs = [BenchRequest("AB"[i], f"rev{i}", tmp_path, tmp_path / "ab" / f"r{i}", "smoke", 0,
                         rows=(("c", "p"),)) for i in range(2)]
    run_pipelined(runner, reqs, ahead=2)
    got = bench_timeline([tmp_path / "ab"], "A/B")
    # the first bench was released at once and waited its whole start-up; the second,
    # started with it, was at its gate when the first had measured; shadows leave no record
    assert 0.8 - 0.05 < got["A/B: start-up wait"] < 6.0, got
    assert 1.6 - 0.05 < got["A/B: measuring"] < 1.6 + 3.0, got
    # each bench's teardown after its atexit (0.3 s) runs beside the next bench: the
    # pipeline moved on when the results were written, and reaped the process at its end
    assert got["A/B: exit"] < 0.3, got
    records = [json.loads(f.read_text()) for f in (tmp_path / "ab").glob("*.time.json")]
    # ... and each record's `reaped` is its process's end (the first one's while the
    # second measured for 0.8 s), so reaped - exiting is the teardown's own time
    assert all(0.3 - 0.05 < r["reaped"] - r["exiting"] < 0.3 + 0.3 for r in records), records
    assert all(r["ended"] - r["exiting"] < 0.25 for r in records), records
    assert not runner.exiting
    # a mapped runner (the job's A/B gives its plugins to one side this way) reaps too
    mapped = with_requests(runner, lambda req: req)
    run_pipelined(mapped, [BenchRequest("A", "rev9", tmp_path, tmp_path / "m" / "r9", "smoke",
                                        0, rows=(("c", "p"),))])
    assert not runner.exiting
    assert "reaped" in json.loads((tmp_path / "m" / "r9.time.json").read_text())
    assert not list((tmp_path / "ab").glob("*.ready"))          # the runner removed them
    assert not list((tmp_path / "ab").glob("*.exit"))


def test_a_bench_that_fails_before_its_results_is_waited_for_and_raises(monkeypatch, tmp_path):
    """The early release needs results on disk: a bench that exits at its atexit without
    any (a crash) is waited for, and its exit code and last line raise as before."""
    code = (f"import runpy, sys; runpy.run_path({str(GATE_PLUGIN)!r}); "
            "sys.exit('harness bench: error: no such matrix')")
    monkeypatch.setattr(bench_runner, "bench_command", lambda req: [sys.executable, "-c", code])
    req = BenchRequest("A", "rev0", tmp_path, tmp_path / "ab" / "r0", "smoke", 0)
    with pytest.raises(CompareError, match="exited 1: harness bench: error: no such matrix"):
        run_pipelined(SubprocessRunner(), [req])


def test_no_records_no_parts(tmp_path):
    assert bench_timeline([tmp_path, tmp_path / "missing"], "A/B") == {}
    (tmp_path / "x.time.json").write_text("{not json")
    assert bench_timeline([tmp_path], "A/B") == {}


def _row_reqs(rows_each: list[int]) -> list[BenchRequest]:
    return [BenchRequest("AB"[i % 2], f"rev{i}", Path("."), Path(f"out{i}"), "smoke", i // 2,
                         rows=tuple((f"case{j}", "fp16_cache") for j in range(n)))
            for i, n in enumerate(rows_each)]


def test_short_benches_get_a_deeper_pipeline():
    """Benches of one row measure for ~1 s against a ~5 s start: with two ahead each waited
    for its own start (q5's extra rounds: 12.4 s of waiting in 21 s), so the pipeline
    starts as many ahead as a start takes benches (at most ``MAX_AHEAD``); benches of many
    rows, or of whole matrices, keep two."""
    assert pipeline.ahead_for(_reqs(4)) == pipeline.AHEAD            # no rows: whole cases
    assert pipeline.ahead_for(_row_reqs([23, 18, 5])) == 3           # 5 rows: ~1.8 s each
    assert pipeline.ahead_for(_row_reqs([23, 18])) == pipeline.AHEAD
    assert pipeline.ahead_for(_row_reqs([1] * 8)) == pipeline.MAX_AHEAD
    assert pipeline.ahead_for([]) == pipeline.AHEAD
    rec = Recorder()
    run_pipelined(rec, _row_reqs([1] * 8))
    first_release = rec.events.index(("release", 0))
    assert rec.events[:first_release] == [("start", i) for i in range(pipeline.MAX_AHEAD)]
    _one_released_at_a_time(rec.events)
    assert [i for what, i in rec.events if what == "finish"] == list(range(8))
    # every request started once, then one shadow per release past the last request
    starts = [i for what, i in rec.events if what == "start"]
    assert sorted(i for i in starts if i < 100) == list(range(8))
    assert len(starts) == 8 + pipeline.MAX_AHEAD
    rec = Recorder()
    run_pipelined(rec, _row_reqs([1] * 8), ahead=2)                  # the caller's choice wins
    assert rec.events[:3] == [("start", 0), ("start", 1), ("release", 0)]
