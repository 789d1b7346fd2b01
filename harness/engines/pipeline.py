"""Pipelined benches: one measures at a time while the next ones start up.

``run_pipelined(runner, reqs)`` runs the requests in order; with a runner that has
``start`` / ``release`` / ``finish`` / ``abort`` (``bench_runner.SubprocessRunner``) the
next benches (``ahead_for``: two, more when the benches are short) are started and held at
their gates while the current one measures, and the last ones measure beside shadows of the
last request (started, never released), so every bench measures beside starting
processes. ``Pipeline`` does the same in two steps (``prime``, then ``run``), so a caller
can work while the first benches start up. A runner with ``reap()`` has it called at the
end: benches it let go on at their exit (their results written) are waited for there.
``HeldRunner`` lets benches start before the caller allows them to measure. A pipeline
given a ``tail`` (requests started ``late``, without rows) starts those in the shadows'
places and hands them over at its end (``keep``): ``HeldBenches`` gives each one later
request that fits it, so the next pipeline's first benches are already started (the A/B's
extra rounds, which wait for the rounds before them to know their rows).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import CompareError
from .bench_runner import BenchRequest

#: Benches started ahead of the one measuring. A bench process takes ~5 s to start (python,
#: torch, the CUDA context, the paths) and an A/B bench of a few rows measures for 2-4 s,
#: so with one started ahead every such bench waited for its own start: 5.5 s per bench
#: for 2 s of measuring in the foreign job's A/B of d1, 2026-12-05 (H100). With two ahead,
#: one of them is still starting while a bench measures, as with one ahead.
AHEAD = 2

#: How deep a pipeline of short benches goes (``ahead_for``). Figures of q5 (H200,
#: 2026-12-06, the job's A/B): a bench process took 4.5-5.6 s from its start to its gate;
#: a bench of one row then measured for 0.9-1.4 s, one of 5 rows 2.1-2.3 s, of 18 rows
#: 4.4-4.6 s, of 23 rows 5.5-5.7 s (about 0.7 s plus 0.22 s a row). Two ahead kept the
#: benches of many rows busy (the three rounds measured for 40 of their 41 s) but left the
#: extra rounds' one-row benches waiting for their own start: 12.4 of those 21 s.
START_S = 5.0
BENCH_FIXED_S = 0.7
BENCH_ROW_S = 0.22
MAX_AHEAD = 6


def ahead_for(reqs: Sequence[BenchRequest]) -> int:
    """The benches to start ahead of the one measuring, so that a bench is ready at its
    gate when its turn comes: a start (``START_S``) over the shortest bench's expected
    measuring time (``BENCH_FIXED_S`` + ``BENCH_ROW_S`` a row), between ``AHEAD`` and
    ``MAX_AHEAD``. A request without ``rows`` (a whole matrix, or cases by filter)
    measures for long: ``AHEAD``. The ones ahead wait at their gates, idle but for their
    CUDA context, and the benches of both sides measure beside the same pipeline."""
    if not reqs or any(not r.rows for r in reqs):
        return AHEAD
    shortest = min(BENCH_FIXED_S + BENCH_ROW_S * len(r.rows) for r in reqs)
    return max(AHEAD, min(MAX_AHEAD, math.ceil(START_S / shortest)))


class Pipeline:
    """``run_pipelined`` in two steps: ``prime()`` starts the first ``ahead`` benches,
    which start up and wait at their gates, and ``run()`` measures every request in order
    (priming first if not yet done). Between the two the caller may do other work (the
    job's perplexity step while the machine factor's benches start up). ``abort()`` (or
    leaving a ``with`` block) kills the benches still held; a plain callable runner is
    run one request after another by ``run()`` and primes nothing.
    ``tail``: ``late`` requests started instead of the first shadows; those a finished
    ``run()`` still holds go to ``keep(request, handle)`` instead of being killed."""

    def __init__(self, runner, reqs: Sequence[BenchRequest], ahead: int | None = None,
                 tail: Sequence[BenchRequest] = (),
                 keep: Callable[[BenchRequest, object], object] | None = None) -> None:
        self.runner, self.reqs = runner, list(reqs)
        self.ahead = max(1, ahead_for(self.reqs) if ahead is None else ahead)
        self.held: deque = deque()
        self.primed = False
        if tail and keep is None:
            raise CompareError("a pipeline's tail needs a keep() to hand its benches to")
        self.tail, self.keep = list(tail), keep
        self.tails: dict[int, BenchRequest] = {}     # id(handle) -> its tail request

    def _begin(self, j: int):
        # past the last request: the tail's late benches, then shadows of the last, stopped
        # at their gates, so the last benches too measure beside starting processes, as
        # every other bench of both sides does
        reqs, k = self.reqs, j - len(self.reqs)
        if k < 0:
            return self.runner.start(reqs[j])
        if k < len(self.tail):
            handle = self.runner.start(self.tail[k])
            self.tails[id(handle)] = self.tail[k]
            return handle
        return self.runner.start(shadow(reqs[-1], k - len(self.tail)))

    def prime(self) -> Pipeline:
        if not self.primed and self.reqs and hasattr(self.runner, "start"):
            try:
                for j in range(self.ahead):
                    self.held.append(self._begin(j))
            except BaseException:
                self.abort()
                raise
        self.primed = True
        return self

    def run(self, on_start: Callable[[int], object] = lambda i: None,
            on_done: Callable[[int], object] = lambda i: None) -> None:
        runner = self.runner
        if not hasattr(runner, "start"):
            for i, req in enumerate(self.reqs):
                on_start(i)
                runner(req)
                on_done(i)
            return
        try:
            self.prime()
            for i in range(len(self.reqs)):
                cur = self.held.popleft()
                try:
                    on_start(i)
                    runner.release(cur)
                except BaseException:             # never released: it goes with the others
                    runner.abort(cur)
                    raise
                self.held.append(self._begin(i + self.ahead))
                runner.finish(cur)
                on_done(i)
            self._hand_over()
        finally:                                  # done, or failed: the held ones go
            self.abort()
            if hasattr(runner, "reap"):           # and the ones still exiting are waited for
                runner.reap()

    def _hand_over(self) -> None:
        """The tail's benches still held go to ``keep`` (the shadows stay, to be killed)."""
        kept = [h for h in self.held if id(h) in self.tails]
        self.held = deque(h for h in self.held if id(h) not in self.tails)
        for handle in kept:
            self.keep(self.tails.pop(id(handle)), handle)

    def abort(self) -> None:
        while self.held:
            self.runner.abort(self.held.popleft())

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.abort()


def run_pipelined(runner, reqs: Sequence[BenchRequest],
                  on_start: Callable[[int], object] = lambda i: None,
                  on_done: Callable[[int], object] = lambda i: None,
                  ahead: int | None = None, tail: Sequence[BenchRequest] = (),
                  keep: Callable[[BenchRequest, object], object] | None = None) -> None:
    """Run ``reqs`` in order, one measuring at a time; with a pipelining runner the next
    ``ahead`` benches (None: ``ahead_for(reqs)``) are started (and held at their gates)
    while the current one measures. ``on_start(i)`` runs when request i may start
    measuring, ``on_done(i)`` when it is done. A failure kills the benches held at their
    gates and propagates. ``tail`` and ``keep``: ``Pipeline``'s."""
    Pipeline(runner, reqs, ahead, tail, keep).run(on_start, on_done)


def fit_key(req: BenchRequest) -> BenchRequest:
    """What must be equal for a bench started ``late`` to serve ``req``: everything but
    its rows and its worktree (a path of the same commit)."""
    return replace(req, rows=(), late=False, worktree=Path(),
                   out_dir=Path(req.out_dir).resolve())


def can_hold(runner) -> bool:
    """Whether ``runner`` can start a bench before its rows are known and give them later."""
    return all(hasattr(runner, name) for name in ("start", "release", "finish", "abort",
                                                  "fill"))


class HeldBenches:
    """A pipelining ``runner`` (``can_hold``) with benches started ahead of their requests.
    ``hold(req, handle)`` keeps a bench started ``late`` for ``req``; ``start`` gives a
    request that differs from a held one only in its rows (and worktree) that bench, its
    rows filled in (``fill``), and starts any other. ``keep_only`` kills the held benches
    no given request fits; ``close`` (or leaving a ``with`` block) kills the rest. The
    runner's ``release`` / ``finish`` / ``abort`` / ``fill`` / ``reap`` pass through.

    Extension point: the wrapped runner (``bench_runner.SubprocessRunner``, or a test's)."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.held: dict[BenchRequest, list] = {}
        self.taken = 0
        self.release, self.finish, self.abort = runner.release, runner.finish, runner.abort
        self.fill = runner.fill

    def hold(self, req: BenchRequest, handle) -> None:
        self.held.setdefault(fit_key(req), []).append(handle)

    def holds(self, req: BenchRequest) -> bool:
        return bool(self.held.get(fit_key(req)))

    def start(self, req: BenchRequest):
        waiting = self.held.get(fit_key(req))
        if not waiting:
            return self.runner.start(req)
        handle = waiting.pop(0)
        self.runner.fill(handle, req.rows)
        self.taken += 1
        return handle

    def __call__(self, req: BenchRequest) -> None:
        self.runner(req)

    def reap(self) -> None:
        if hasattr(self.runner, "reap"):
            self.runner.reap()

    def keep_only(self, reqs: Iterable[BenchRequest]) -> None:
        """Kill the held benches that none of ``reqs`` (as many as fit) will take."""
        wanted: dict[BenchRequest, int] = {}
        for req in reqs:
            wanted[fit_key(req)] = wanted.get(fit_key(req), 0) + 1
        for k, handles in self.held.items():
            while len(handles) > wanted.get(k, 0):
                with contextlib.suppress(Exception):
                    self.runner.abort(handles.pop())

    def close(self) -> None:
        self.keep_only(())
        self.held.clear()

    def __enter__(self) -> HeldBenches:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def shadow(req: BenchRequest, k: int = 0) -> BenchRequest:
    """The k-th bench that ``run_pipelined`` starts and stops at its gate after ``req``, the
    last (it measures nothing): its log goes to ``<out_dir>.shadow[k].log``."""
    suffix = ".shadow" + (str(k + 1) if k else "")
    return replace(req, out_dir=req.out_dir.with_name(req.out_dir.name + suffix))


class HeldRunner:
    """A pipelining ``runner`` whose benches may start now but measure only after
    ``open()``: ``release`` waits for it. ``harness job`` runs its same-model A/B this
    way in a thread while its perplexity step runs, so the A/B's first benches start up
    beside the ppl step instead of after it (q5 of 2026-12-06, an H200: the first bench
    waited 3.8 s for its start after the 4.6 s ppl step). ``cancel()`` makes a waiting or
    later ``release`` raise ``CompareError`` (the pipeline then kills what it holds). A
    plain callable runner waits for ``open()`` in its call."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self._open = threading.Event()
        self._cancelled = False
        if hasattr(runner, "start"):          # pipelining where the runner has it
            self.start, self.finish, self.abort = runner.start, runner.finish, runner.abort
            self.release = self._release
        if hasattr(runner, "reap"):
            self.reap = runner.reap
        if hasattr(runner, "fill"):           # rows given to a bench started late
            self.fill = runner.fill

    def __call__(self, req: BenchRequest) -> None:
        self._wait()
        self.runner(req)

    def _release(self, handle) -> None:
        self._wait()
        self.runner.release(handle)

    def _wait(self) -> None:
        self._open.wait()
        if self._cancelled:
            raise CompareError("the job stopped before its A/B measured")

    def open(self) -> None:
        self._open.set()

    def cancel(self) -> None:
        self._cancelled = True
        self._open.set()


class DeferredEcho:
    """An ``echo`` that keeps its lines until ``flush()``, then prints as it is called: the
    lines of an A/B run in a thread by a ``HeldRunner`` (``harness job``'s same-model A/B)
    wait for those of the step it runs beside (the ppl step's)."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo, self.lines, self.live = echo, [], False
        self.lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self.lock:
            if not self.live:
                self.lines.append(line)
                return
        self.echo(line)

    def flush(self) -> None:
        with self.lock:
            self.live, lines, self.lines = True, self.lines, []
        for line in lines:
            self.echo(line)
