"""Running one revision's ``harness bench`` in its worktree, alone or pipelined.

* ``BenchRequest`` and ``bench_command``: one measurement run of one revision and the
  command line of ``python -m harness bench`` for it (the only interface to the engine).
* ``SubprocessRunner`` (the instance ``subprocess_runner``): runs it there with
  ``PYTHONPATH`` = the worktree, so each revision is measured by its own code. Called
  (``runner(req)``), one bench at a time. Its ``start`` / ``release`` / ``finish`` /
  ``abort`` let ``pipeline.run_pipelined`` start the next bench while the current one measures:
  the next processes (``AHEAD``, two) import torch, create their CUDA contexts and load
  the paths, then wait at a gate (``bench_gate.py``, given as the first ``--plugin``:
  plugins load after the paths and before anything is measured) until the current bench
  has exited. Only one bench measures at a time; what is hidden is each process's start
  (about 5 s; an A/B bench of a few rows measures for 2-10 s). Every bench measures while
  later ones start up (the last ones beside shadows of the last, stopped at their gates),
  so whatever a starting process costs the measuring one is the same for every bench of
  both sides.
* every bench gets ``bench_data.py`` as its first ``--plugin``: a baseline commit whose
  case-data generator gives the same bits reads this checkout's cached data instead of
  making it again (``bench_data.SAME_BITS``).
* each bench leaves ``<out_dir>.time.json`` (started, reached its gate, released, ended);
  ``bench_timeline`` sums a folder's into measuring and start-up waits.
* ``with_requests(runner, fn)``: the runner with ``fn`` applied to every request, its
  pipelining kept (the job's A/B gives its plugins to one side this way).
* ``BenchRequest.rows``: the exact (case, path) rows to measure; the runner writes them
  beside the bench's results and gives it ``bench_rows.py`` (the last ``--plugin``), so an
  A/B measures the rows it judges and not every path of their cases. A request ``late``
  names its row file at the start and gets the rows from ``fill`` before its release
  (``prestart``: benches started before the rows are known).

Extension point: ``BenchRunner``, any callable taking a ``BenchRequest`` and leaving a
result directory under ``request.out_dir``; tests pass fake ones. A runner that also has
``start(req) -> handle``, ``release(handle)``, ``finish(handle)`` and ``abort(handle)`` is
pipelined by ``pipeline.run_pipelined``; a plain callable is run one request after another.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from ..errors import CompareError

#: The gate plugin (standard library only: an old revision's bench runs it too) and the
#: variable naming the file whose existence opens it.
GATE_PLUGIN = Path(__file__).resolve().with_name("bench_gate.py")
GATE_ENV = "HARNESS_BENCH_GATE"
#: The case-data plugin (every bench; also run by an old revision's): a baseline commit
#: whose generator gives the same bits reads this checkout's cached data (``bench_data.py``).
DATA_PLUGIN = Path(__file__).resolve().with_name("bench_data.py")
#: The row-selection plugin (also run by an old revision's bench) and its variable: the
#: JSON file of the [case_id, path] pairs to measure (``BenchRequest.rows``).
ROWS_PLUGIN = Path(__file__).resolve().with_name("bench_rows.py")
ROWS_ENV = "HARNESS_BENCH_ROWS"

#: Rows of a path derived for a SwiGLU pair are measured through the registered path they
#: come from (``kernels.swiglu_pair.paths_for_case``): ``harness bench --paths`` takes
#: registered names only, at any commit. Kept torch-free here; a test holds it equal to
#: what ``paths_for_case`` derives.
DERIVED_FROM = {"native_int4_fused": "native_int4"}


def bench_paths(paths) -> list[str]:
    """The registered paths whose bench measures rows of ``paths``."""
    return sorted({DERIVED_FROM.get(p, p) for p in paths})


def bench_rows(keys) -> tuple[tuple[str, str], ...]:
    """``BenchRequest.rows`` for the (case_id, path, mode) ``keys``: each row named by the
    registered path that measures it."""
    return tuple(sorted({(k[0], DERIVED_FROM.get(k[1], k[1])) for k in keys}))


@dataclass(frozen=True)
class BenchRequest:
    """One measurement run of one revision, in its worktree, into ``out_dir``.

    ``plugins`` are passed to the bench as ``--plugin``: a relative path is read from the
    revision's own checkout (a file that differs between commits plants what they do).
    ``rows``: (case_id, path) pairs, the only rows to measure (empty: every path given on
    every case selected); a path must be a registered one, a SwiGLU pair's derived row
    named by the path it comes from (``bench_rows``). ``settings``: ``--set KEY=VALUE``.
    """

    label: str
    revision: str
    worktree: Path
    out_dir: Path
    matrix: str
    round: int
    filter: str | None = None
    paths: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()
    rows: tuple[tuple[str, str], ...] = ()
    #: ``KEY=VALUE`` settings given to the bench as ``--set`` (any revision's bench takes it)
    settings: tuple[str, ...] = ()
    #: its rows come after it has started (``prestart.Prestarted``): the runner names the
    #: row file at the start and writes nothing; ``SubprocessRunner.fill`` writes it before
    #: the bench is released (the row plugin reads it after the gate). Gated benches only.
    late: bool = False


BenchRunner = Callable[[BenchRequest], None]


def bench_command(req: BenchRequest, python: str = sys.executable) -> list[str]:
    """The ``harness bench`` command line for ``req`` (the only interface to the engine)."""
    cmd = [python, "-m", "harness", "bench", "--matrix", req.matrix]
    if req.filter:
        cmd += ["--filter", req.filter]
    if req.paths:
        cmd += ["--paths", ",".join(req.paths)]
    if req.modes:
        cmd += ["--mode", ",".join(req.modes)]
    for plugin in req.plugins:
        cmd += ["--plugin", plugin]
    for setting in req.settings:
        cmd += ["--set", setting]
    return cmd + ["--no-compare", "--out", str(req.out_dir)]


@dataclass
class Started:
    """A bench process started by ``SubprocessRunner.start``; its times (``time.time()``)
    are kept beside its log (``<out_dir>.time.json``, ``bench_timeline`` reads them)."""

    req: BenchRequest
    proc: subprocess.Popen
    log: Path
    fh: IO
    gate: Path | None
    started: float = 0.0
    released: float | None = None


class SubprocessRunner:
    """``harness bench`` of a request in its worktree (``PYTHONPATH`` = the worktree).

    ``HARNESS_COMMIT`` is dropped from the bench's environment: the worktree is a git
    checkout, and every revision must record its own commit. A relative ``out_dir`` is
    taken from this process's directory. The log goes beside ``out_dir``.

    A gated bench is done when its ``atexit`` has run (the gate plugin's ``.exit`` file)
    and its results are on disk: ``finish`` returns then, and the pipeline releases the
    next bench while this one's interpreter and CUDA context tear down (0.2-1.5 s a
    bench, measured on an H100 from its results' time stamp, 2026-12-06); ``reap`` waits
    for such processes (the pipeline calls it at its end). A bench that fails before
    writing results is waited for and raises as before."""

    def __init__(self) -> None:
        self.exiting: list[Started] = []

    def __call__(self, req: BenchRequest) -> None:
        self.finish(self.start(req, gated=False))

    def start(self, req: BenchRequest, gated: bool = True) -> Started:
        env = {k: v for k, v in os.environ.items()
               if k not in ("HARNESS_COMMIT", GATE_ENV, ROWS_ENV)}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(req.worktree), env.get("PYTHONPATH", "")) if p)
        # the bench runs in the worktree: a relative --out (compare's default, the job's
        # results/) would land there, where the caller never looks
        req = replace(req, out_dir=req.out_dir.resolve())
        req.out_dir.mkdir(parents=True, exist_ok=True)
        gate = None
        if gated:                                 # it opens when this file exists
            gate = req.out_dir.parent / f".{req.out_dir.name}.gate"
            gate.unlink(missing_ok=True)
            env[GATE_ENV] = str(gate)
            req = replace(req, plugins=(str(GATE_PLUGIN), *req.plugins))
        # first: it must act before anything is generated (a no-op on this checkout's own)
        req = replace(req, plugins=(str(DATA_PLUGIN), *req.plugins))
        if req.late and not gated:
            raise CompareError(f"bench of {req.label} ({req.revision[:12]}): its rows come "
                               "after its start, so it must wait at a gate")
        if req.rows or req.late:                  # last: it restricts wrapped paths too
            rows = rows_file(req)
            rows.unlink(missing_ok=True)
            if not req.late:
                rows.write_text(json.dumps(sorted(req.rows)))
            env[ROWS_ENV] = str(rows)
            req = replace(req, plugins=(*req.plugins, str(ROWS_PLUGIN)))
        log = req.out_dir.parent / f"{req.out_dir.name}.log"
        fh = open(log, "w")
        t0 = time.time()
        proc = subprocess.Popen(bench_command(req), cwd=req.worktree, env=env, stdout=fh,
                                stderr=subprocess.STDOUT)
        return Started(req, proc, log, fh, gate, started=t0)

    def fill(self, s: Started, rows: Sequence[tuple[str, str]]) -> None:
        """Give a bench started ``late`` its rows (before ``release``): its row file is
        written and its request records them."""
        if not s.req.late or s.released is not None:
            raise CompareError(f"bench of {s.req.label} ({s.req.revision[:12]}) already has "
                               "its rows")
        rows_file(s.req).write_text(json.dumps(sorted(rows)))
        s.req = replace(s.req, rows=tuple(rows), late=False)

    def release(self, s: Started) -> None:
        if s.released is None:
            s.released = time.time()
        if s.gate is not None:
            s.gate.touch()

    def finish(self, s: Started) -> None:
        self.release(s)
        try:
            rc = self._wait(s)
        except BaseException:                 # interrupted: the bench does not outlive us
            self.abort(s)
            raise
        self._close(s)
        if rc is None:                        # done, its teardown left to run beside the next
            self.exiting.append(s)
            return
        if rc != 0 and not any(s.req.out_dir.rglob("*.csv")):
            lines = [ln for ln in s.log.read_text(errors="replace").splitlines() if ln.strip()]
            tail = lines[-1:] or ["no output"]
            raise CompareError(f"bench of {s.req.label} ({s.req.revision[:12]}) round "
                               f"{s.req.round} exited {rc}: {tail[0].strip()} (log {s.log})")

    def _wait(self, s: Started) -> int | None:
        """The bench's exit code, or None once its ``atexit`` has run with results on disk
        (a gated bench: see the class docstring). Meanwhile the benches still exiting are
        reaped as they end, so each one's ``reaped`` is its process's end."""
        if s.gate is None:
            return s.proc.wait()
        done = Path(str(s.gate) + ".exit")
        while True:
            self._reap_ended()
            rc = s.proc.poll()
            if rc is not None:
                return rc
            if done.exists() and any(s.req.out_dir.rglob("*.csv")):
                return None
            time.sleep(0.01)          # the gate plugin's own poll: a stat and a waitpid

    def _reap_ended(self) -> None:
        for s in [s for s in self.exiting if s.proc.poll() is not None]:
            self.exiting.remove(s)
            _reaped(s)

    def reap(self) -> None:
        """Wait for the benches ``finish`` let go on at their exit; each one's time record
        gets ``reaped`` (the process's end: its teardown ran beside the next bench)."""
        while self.exiting:
            s = self.exiting.pop(0)
            s.proc.wait()
            _reaped(s)

    def abort(self, s: Started) -> None:
        s.proc.kill()
        s.proc.wait()
        self._close(s)

    @staticmethod
    def _close(s: Started) -> None:
        s.fh.close()
        ready = exiting = None
        if s.gate is not None:
            ready = _stamp(Path(str(s.gate) + ".ready"))   # None: never reached its gate
            exiting = _stamp(Path(str(s.gate) + ".exit"))  # None: killed, or an old gate
            s.gate.unlink(missing_ok=True)
        if s.released is not None:        # a bench that measured (not a shadow)
            record = {"label": s.req.label, "round": s.req.round, "rows": len(s.req.rows),
                      "started": s.started, "ready": ready, "released": s.released,
                      "exiting": exiting, "ended": time.time()}
            with contextlib.suppress(OSError):
                s.log.with_name(f"{s.req.out_dir.name}.time.json").write_text(
                    json.dumps(record) + "\n")


def rows_file(req: BenchRequest) -> Path:
    """The JSON file of ``req``'s rows, beside its results (``ROWS_ENV`` names it)."""
    return req.out_dir.parent / f"{req.out_dir.name}.rows.json"


def _reaped(s: Started) -> None:
    """Add the time now, the end of ``s``'s process, to its time record as ``reaped``."""
    record = s.log.with_name(f"{s.req.out_dir.name}.time.json")
    with contextlib.suppress(OSError, ValueError):
        rec = json.loads(record.read_text())
        record.write_text(json.dumps({**rec, "reaped": time.time()}) + "\n")


def _stamp(path: Path) -> float | None:
    """The time a gate plugin wrote into ``path`` (then removed), or None."""
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None
    finally:
        path.unlink(missing_ok=True)


subprocess_runner = SubprocessRunner()


def bench_timeline(folders: Sequence[Path], part: str) -> dict[str, float]:
    """Where the benches run under ``folders`` spent their time, from the records
    ``SubprocessRunner`` leaves beside their logs, as ``"<part>: measuring"`` (from the
    gate's opening, or the bench reaching its gate when that came later, to its exit: its
    data, set-up, measuring and writing), ``"<part>: start-up wait"`` (the time the
    pipeline waited for a released bench to finish starting up: python, torch, the CUDA
    context, the paths) and ``"<part>: exit"`` (from the bench's ``atexit``, its results
    written, to the process's end: the interpreter's and the CUDA context's teardown;
    where the benches recorded it, and then not in "measuring"); empty when no bench left
    a record. A bench run without a gate counts whole as measuring."""
    measuring = wait = exiting = 0.0
    benches = exits = 0
    for folder in folders:
        for f in sorted(Path(folder).rglob("*.time.json")):
            try:
                rec = json.loads(f.read_text())
                released, ended, ready = rec["released"], rec["ended"], rec.get("ready")
                go = max(released, ready) if ready is not None else released
            except (OSError, ValueError, KeyError, TypeError):
                continue
            benches += 1
            wait += go - released
            done = rec.get("exiting")
            if isinstance(done, (int, float)) and go <= done <= ended:
                exits += 1
                exiting += ended - done
                measuring += done - go
            else:
                measuring += ended - go
    if not benches:
        return {}
    return {f"{part}: measuring": measuring, f"{part}: start-up wait": wait,
            **({f"{part}: exit": exiting} if exits else {})}


class _Mapped:
    """``runner`` with ``fn`` applied to each request (see ``with_requests``)."""

    def __init__(self, runner, fn: Callable[[BenchRequest], BenchRequest]) -> None:
        self.runner, self.fn = runner, fn
        if hasattr(runner, "start"):          # pipelining only where the runner has it
            self.start = lambda req: runner.start(fn(req))
            self.release, self.finish, self.abort = runner.release, runner.finish, runner.abort
        if hasattr(runner, "reap"):           # and the wait for benches let go at their exit
            self.reap = runner.reap
        if hasattr(runner, "prestart"):       # a bench started before its rows are known
            self.prestart = lambda req: runner.prestart(fn(req))
        if hasattr(runner, "fill"):           # and the rows it is given later
            self.fill = runner.fill

    def __call__(self, req: BenchRequest) -> None:
        self.runner(self.fn(req))


def with_requests(runner, fn: Callable[[BenchRequest], BenchRequest]):
    """``runner`` with every request passed through ``fn`` first, pipelining kept."""
    return _Mapped(runner, fn)

