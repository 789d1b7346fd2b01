"""The search behind ``harness bisect``: measure commits of a first-parent range in
worktrees, judge each against GOOD with the harness's gate, halve the range.

``Bisector.search(good, candidates)``: GOOD is measured first (the reference every
commit is judged against); the last candidate (BAD) is taken to be bad, as ``git
bisect`` does, and measured only when the search ends on it. A commit is judged by
``reports.comparison.compare_runs`` (the environment policy, then ``gate.evaluate``
with the baselines' noise margins), exactly as ``harness compare`` judges B against A;
``remeasure`` is the gate's own hook: the rows it asks for (AMBIGUOUS, and SLOWER before
it counts) are measured again, GOOD and the commit interleaved, restricted to their
cases, paths and modes. Rows that stay AMBIGUOUS are measured again, at most
``remeasure_max`` hook calls per commit in all; after that AMBIGUOUS counts as not
regressed (the gate does not fail it either) and the visit says so. A commit is
*regressed* when a path's row (not a peer's: peers are comparison columns, as in the
gate) has a final verdict in ``look_for``. Every mode counts, so the gate is run with
``gate_eager_speed = 1``: a SLOWER row of an eager or CPU mode is confirmed by a
re-measurement like a graph row before it counts. A commit whose bench fails
is skipped (the nearest other commit of the range is tried); if skips leave no single
answer, the outcome names the commits the first bad one is among. A commit the
environment policy will not compare with GOOD (e.g. it changed a measured setting in its
pyproject) is skipped the same way, with the reason.

Extension point: ``runner`` (``revisions.BenchRunner``): tests pass a fake one.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import Settings
from ..errors import CompareError
from ..reports.comparison import compare_runs
from ..reports.verdicts import GateResult, RowVerdict, Verdict
from ..results.environment import IncompatibleBaselineError
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import Run, load_run
from .revisions import BenchRequest, BenchRunner, Commit, WorktreePool, case_filter

#: What ``--look-for`` may name, and the verdicts that make a commit regressed.
LOOK_FOR: dict[str, frozenset[Verdict]] = {
    "speed": frozenset({Verdict.SLOWER}),
    "accuracy": frozenset({Verdict.WORSE_ACCURACY, Verdict.LESS_ACCURATE}),
    "errors": frozenset({Verdict.ERROR, Verdict.MISSING, Verdict.NONDETERMINISTIC,
                         Verdict.LOST_DISPATCH}),
}


@dataclass(frozen=True)
class Visit:
    """One commit measured and judged against GOOD."""

    position: int                         # in the candidates (GOOD: -1)
    commit: Commit
    state: str                            # "regressed", "good", "skipped" (or "reference")
    result: GateResult | None = None
    hits: tuple[RowVerdict, ...] = ()     # rows with a looked-for verdict
    ambiguous: int = 0                    # rows still AMBIGUOUS after the re-measurements
    remeasures: int = 0
    benches: int = 0
    seconds: float = 0.0
    problem: str = ""


@dataclass
class Outcome:
    """What a search found, and what it cost."""

    good: Commit
    candidates: list[Commit]
    visits: list[Visit] = field(default_factory=list)
    first_bad: Visit | None = None
    among: list[Commit] = field(default_factory=list)   # skips left no single answer
    benches: int = 0
    seconds: float = 0.0

    @property
    def commits_measured(self) -> int:
        """Distinct commits measured and judged (GOOD included, skipped ones not)."""
        return len({v.commit.sha for v in self.visits if v.state != "skipped"})

    @property
    def commits_visited(self) -> int:
        """Distinct commits the search tried, skipped ones included."""
        return len({v.commit.sha for v in self.visits})


def _replace_rows(rows: Sequence[ResultRow], fresh: Sequence[ResultRow]) -> list[ResultRow]:
    by_key = {r.key: r for r in fresh}
    return [replace(by_key[r.key], matrix=r.matrix) if r.key in by_key else r for r in rows]


class Bisector:
    """Measures and judges commits of one repository (see the module docstring)."""

    def __init__(
        self, repo: Path, settings: Settings, *, work_dir: Path, pool: WorktreePool,
        matrix: str, filter: str | None = None, paths: Sequence[str] = (),
        modes: Sequence[str] = (), plugins: Sequence[str] = (), remeasure_max: int = 2,
        look_for: Collection[Verdict] = LOOK_FOR["speed"] | LOOK_FOR["accuracy"],
        margins: Callable[[Run], Mapping[Key, float]] = lambda run: {},
        runner: BenchRunner, echo: Callable[[str], None] = print,
    ) -> None:
        self.repo, self.work, self.pool = repo, work_dir, pool
        self.settings = replace(settings, gate_eager_speed=1)    # every mode counts
        self.matrix, self.filter, self.paths, self.modes = matrix, filter, paths, modes
        self.plugins, self.remeasure_max, self.look_for = tuple(plugins), remeasure_max, look_for
        self.margins_of, self.runner, self.echo = margins, runner, echo
        self.benches = 0
        self.good: Commit | None = None
        self.good_run: Run | None = None
        self.margins: Mapping[Key, float] = {}

    # ------------------------------------------------------------------ measuring
    def measure(self, commit: Commit, tag: str, filt: str | None = None,
                paths: Sequence[str] | None = None, modes: Sequence[str] | None = None) -> Run:
        """One bench of ``commit`` into ``runs/<sha12>/<tag>``; the first (``m0``) is also
        kept as a stored run under ``results/`` (what ``harness history`` reads)."""
        out = self.work / "runs" / commit.sha[:12] / tag
        if out.exists():
            shutil.rmtree(out)
        self.runner(BenchRequest(
            "GOOD" if commit == self.good else commit.sha[:12], commit.sha,
            self.pool.add(commit.sha), out, self.matrix, self.benches, filt or self.filter,
            tuple(self.paths if paths is None else paths),
            tuple(self.modes if modes is None else modes), self.plugins))
        self.benches += 1
        try:
            run = load_run(out)
        except SchemaError as exc:
            raise CompareError(f"bench of {commit.sha[:12]} left no readable results: "
                               f"{exc}") from None
        if tag == "m0" and run.csv_paths:
            stored = run.csv_paths[0].parent
            shutil.copytree(stored, self.work / "results" / stored.relative_to(out),
                            dirs_exist_ok=True)
        return run

    def _hook(self, commit: Commit, cur_rows: Sequence[ResultRow], count: list[int],
              fresh: dict[str, list[ResultRow]]):
        def remeasure(keys: list[Key]):
            count[0] += 1
            wanted = set(keys)
            filt = case_filter([r for r in cur_rows if r.key in wanted], cur_rows)
            paths, modes = sorted({k[1] for k in keys}), sorted({k[2] for k in keys})
            order = [self.good, commit] if count[0] % 2 else [commit, self.good]
            got = {}
            for side in order:
                self.echo(f"harness bisect:   re-measuring {len(keys)} row(s) of "
                          f"{'GOOD' if side == self.good else side.sha[:12]}")
                got[side.sha] = self.measure(side, f"r{self.benches}", filt, paths, modes)
            fresh["base"] = [r for r in got[self.good.sha].rows if r.key in wanted]
            fresh["cur"] = [r for r in got[commit.sha].rows if r.key in wanted]
            return fresh["base"], fresh["cur"]
        return remeasure

    # ------------------------------------------------------------------ judging
    def reference(self, good: Commit) -> Visit:
        """Measure GOOD: every later commit is judged against these rows."""
        t0, before = time.perf_counter(), self.benches
        self.good = good
        self.good_run = self.measure(good, "m0")
        self.margins = self.margins_of(self.good_run)
        return Visit(-1, good, "reference", benches=self.benches - before,
                     seconds=time.perf_counter() - t0)

    def judge(self, position: int, commit: Commit) -> Visit:
        """Measure ``commit`` and judge it against GOOD (module docstring)."""
        t0, before = time.perf_counter(), self.benches
        count = [0]
        try:
            run = self.measure(commit, "m0")
            base_rows, cur_rows = list(self.good_run.rows), list(run.rows)
            while True:
                fresh: dict[str, list[ResultRow]] = {}
                hook = (self._hook(commit, cur_rows, count, fresh)
                        if count[0] < self.remeasure_max else None)
                result = compare_runs(
                    base_rows, cur_rows, self.good_run, run, self.settings, a_label="GOOD "
                    + self.good.sha[:12], b_label=commit.sha[:12], margins=self.margins,
                    remeasure=hook, echo=self.echo)
                hits = [v for v in result.verdicts
                        if v.verdict in self.look_for and v.role != "peer"]
                ambiguous = [v for v in result.verdicts if v.verdict == Verdict.AMBIGUOUS]
                if hits or not ambiguous or not fresh or count[0] >= self.remeasure_max:
                    break
                base_rows = _replace_rows(base_rows, fresh["base"])
                cur_rows = _replace_rows(cur_rows, fresh["cur"])
        except (CompareError, IncompatibleBaselineError) as exc:
            # a bench that failed, or a commit measured otherwise (its pyproject changed a
            # measured setting): it cannot be judged against GOOD
            return Visit(position, commit, "skipped", remeasures=count[0],
                         benches=self.benches - before, seconds=time.perf_counter() - t0,
                         problem=str(exc))
        finally:
            self.pool.remove(commit.sha)
        return Visit(position, commit, "regressed" if hits else "good", result, tuple(hits),
                     len(ambiguous), count[0], self.benches - before, time.perf_counter() - t0)

    # ------------------------------------------------------------------ the search
    def search(self, good: Commit, candidates: Sequence[Commit],
               on_visit: Callable[[Visit], None] = lambda v: None) -> Outcome:
        """Bisect ``candidates`` (oldest first, after GOOD; the last is BAD)."""
        t0 = time.perf_counter()
        out = Outcome(good, list(candidates))
        ref = self.reference(good)
        out.visits.append(ref)
        on_visit(ref)
        judged: dict[int, Visit] = {}
        lo, hi, skipped = -1, len(candidates) - 1, set()

        def visit(i: int) -> Visit:
            v = self.judge(i, candidates[i])
            judged[i] = v
            out.visits.append(v)
            on_visit(v)
            return v

        while True:
            inner = [i for i in range(lo + 1, hi) if i not in skipped]
            if not inner:
                break
            mid = (lo + hi) // 2
            pick = min(inner, key=lambda i: (abs(i - mid), i))
            v = visit(pick)
            if v.state == "skipped":
                skipped.add(pick)
            elif v.state == "regressed":
                hi = pick
            else:
                lo = pick
        last = judged.get(hi) or visit(hi)
        untested = [candidates[i] for i in sorted(skipped) if lo < i < hi]
        if last.state == "regressed" and not untested:
            out.first_bad = last
        elif last.state != "good":          # skips between, or BAD itself did not measure
            out.among = untested + [candidates[hi]]
        out.benches, out.seconds = self.benches, time.perf_counter() - t0
        return out
