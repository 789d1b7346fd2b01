"""Pipelined benches: one measures at a time while the next ones start up.

``run_pipelined(runner, reqs)`` runs the requests in order; with a runner that has
``start`` / ``release`` / ``finish`` / ``abort`` (``bench_runner.SubprocessRunner``) the
next ``AHEAD`` benches are started and held at their gates while the current one
measures, and the last ones measure beside shadows of the last request (started, never
released), so every bench measures beside starting processes. ``Pipeline`` does the same
in two steps (``prime``, then ``run``), so a caller can work while the first benches
start up. A runner with ``reap()`` has it called at the end: benches it let go on at
their exit (their results written) are waited for there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from .bench_runner import BenchRequest

#: Benches started ahead of the one measuring. A bench process takes ~5 s to start (python,
#: torch, the CUDA context, the paths) and an A/B bench of a few rows measures for 2-4 s,
#: so with one started ahead every such bench waited for its own start: 5.5 s per bench
#: for 2 s of measuring in the foreign job's A/B of d1, 2026-12-05 (H100). With two ahead,
#: one of them is still starting while a bench measures, as with one ahead.
AHEAD = 2


class Pipeline:
    """``run_pipelined`` in two steps: ``prime()`` starts the first ``ahead`` benches,
    which start up and wait at their gates, and ``run()`` measures every request in order
    (priming first if not yet done). Between the two the caller may do other work (the
    job's perplexity step while the machine factor's benches start up). ``abort()`` (or
    leaving a ``with`` block) kills the benches still held; a plain callable runner is
    run one request after another by ``run()`` and primes nothing."""

    def __init__(self, runner, reqs: Sequence[BenchRequest], ahead: int = AHEAD) -> None:
        self.runner, self.reqs, self.ahead = runner, list(reqs), max(1, ahead)
        self.held: deque = deque()
        self.primed = False

    def _begin(self, j: int):
        # past the last request: shadows of it, stopped at their gates, so the last benches
        # too measure beside starting processes, as every other bench of both sides does
        reqs = self.reqs
        return self.runner.start(reqs[j] if j < len(reqs) else shadow(reqs[-1], j - len(reqs)))

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
                on_start(i)
                runner.release(cur)
                self.held.append(self._begin(i + self.ahead))
                runner.finish(cur)
                on_done(i)
        finally:                                  # done, or failed: the held ones go
            self.abort()
            if hasattr(runner, "reap"):           # and the ones still exiting are waited for
                runner.reap()

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
                  ahead: int = AHEAD) -> None:
    """Run ``reqs`` in order, one measuring at a time; with a pipelining runner the next
    ``ahead`` benches are started (and held at their gates) while the current one
    measures. ``on_start(i)`` runs when request i may start measuring, ``on_done(i)`` when
    it is done. A failure kills the benches held at their gates and propagates."""
    Pipeline(runner, reqs, ahead).run(on_start, on_done)


def shadow(req: BenchRequest, k: int = 0) -> BenchRequest:
    """The k-th bench that ``run_pipelined`` starts and stops at its gate after ``req``, the
    last (it measures nothing): its log goes to ``<out_dir>.shadow[k].log``."""
    suffix = ".shadow" + (str(k + 1) if k else "")
    return replace(req, out_dir=req.out_dir.with_name(req.out_dir.name + suffix))
