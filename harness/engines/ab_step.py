"""``harness job``'s A/B confirmation: gated rows that moved are re-judged A/B on this machine.

For each gated matrix of a stored run, the rows to confirm are those its gate failed as
SLOWER and those the *screen* flags (``reports.ab_confirm.screen_keys``): a gated row
whose median moved beyond the setting ``ab_screen`` (2%) against the stored baseline,
Mann-Whitney significant, whatever its cross-machine margin, and every gated row of a
(path, mode) whose median change is beyond it. The commit each baseline row was measured
at (its ``commit``; the baseline json's where the row has none) and the current commit
are measured here, interleaved, restricted to those rows, by ``harness compare`` in git
worktrees (the build cache is shared; one compare for the rows of all matrices: a
baseline promoted with ``harness baseline accept --only-faster`` holds rows of several
commits, and its A side then measures each commit's rows at that commit in every round,
``ab_legs.APart``, beside one B bench of all the rows); ``reports.ab_confirm.apply_ab``
then makes the A/B verdict the row's: SLOWER fails (also for a row inside its
cross-machine margin), SAME or FASTER clears. The A/B record is stored in the matrix's
json (``ab_confirm``) and the gate record is rewritten with the final verdicts, so
``harness report``, ``harness compare`` and ``harness merge`` replay the same verdicts.
Why: between H200s the same build reads ~1.3% (sd) apart per row, up to 5% on single
rows, while processes on one machine differ by ~0.55% at the median, so no cross-machine
margin both holds an unchanged build and catches a 5% slowdown on 95% of the rows
(docs/measurement.md §9).

Needs: the baseline's commit in this repository (CI: a full clone, e.g. actions/checkout
with ``fetch-depth: 0``) and no uncommitted change under ``harness/`` (the measured code
must be a commit). When either is missing, the verdicts stand and one line says why.

The run's ``--plugin`` files (its json's ``plugins``) are given to the current side only:
what the run measured, planted slowdowns included, is what A/B measures on that side. A
plugin file declaring ``HARNESS_AB_SIDES = "both"`` (an instrument) goes to both sides
(``ab_plugins``). The rows to confirm and the records stored are ``ab_pending``'s.

Two steps (``Confirmation``): ``start`` reads the gates and, on a GPU model whose
baseline is another model's, starts the machine factor's benches (``projection_step``);
``finish`` measures, screens, A/Bs and stores, the A/B's round-0 benches started while
the factor measures (``prestart``). ``harness job`` runs its perplexity step between the
two; ``ab_confirm`` does both at once.

Extension point: ``runner`` (a ``revisions.BenchRunner``) measures one revision's bench;
tests pass a fake one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..config import Settings
from ..errors import EXPECTED_ERRORS, one_line
from ..results.schema import Key, ResultRow
from .ab_legs import a_part, selection
from .ab_pending import (  # noqa: F401  (Pending, row_commit: re-exported for the tests)
    Pending,
    commit_groups,
    pending,
    reading_of,
    row_commit,
    store_readings,
)
from .ab_plugins import current_side_plugins, dirty, run_plugins
from .bench_runner import bench_timeline
from .compare import compare
from .pipeline import DeferredEcho, HeldRunner
from .prestart import Prestarted, broad_selection, can_prestart, start_round0
from .projection_step import FactorBenches, factor_bench_settings, project, sample_plan
from .revisions import (
    BenchRunner,
    resolve_revision,
    subprocess_runner,
)


class Confirmation:
    """``ab_confirm`` in two steps, so that ``harness job`` can run its perplexity step
    while the machine factor's benches start up: ``start()`` reads each matrix's stored
    gate and, for another GPU model's matrices, starts the factor's benches at the
    baseline's commits (held at their gates, ``projection_step.FactorBenches``);
    ``finish()`` measures the factor, projects and screens, runs the A/B and stores the
    records; per matrix its new exit code (``ab_confirm`` says what). ``close()`` (or
    leaving a ``with`` block) kills what is still held.

    On another GPU model, with ``ab_screen_round`` 1, the A/B of the rows the projection
    screens starts from what was measured already: the factor's readings at the baseline's
    commits are its round 0 of side A and the job's own bench its round 0 of side B
    (``compare``'s ``seeds``), so it measures ``rounds - 1`` more rounds of each side. The
    default (0) measures every round: the screen chose the rows by those readings."""

    def __init__(self, run_dir: Path, matrices: list[str], *, baselines: str | Path,
                 arch: str, settings: Settings, rounds: int = 3, repo: Path = Path("."),
                 runner: BenchRunner = subprocess_runner,
                 echo: Callable[[str], None] = print,
                 seconds: dict[str, float] | None = None) -> None:
        self.run_dir, self.matrices, self.baselines, self.arch = run_dir, matrices, baselines, arch
        self.settings, self.rounds, self.repo, self.runner = settings, rounds, repo, runner
        self.echo = echo
        self.seconds = {} if seconds is None else seconds
        self.todo: dict[str, Pending] = {}
        self.models: dict[str, tuple[str, str]] = {}
        self.factor: FactorBenches | None = None
        #: the same-model A/B started by ``start()``: (its runner, its future, its echo)
        self.early: tuple[HeldRunner, Future, DeferredEcho] | None = None
        self.started = False
        self.seeded = False
        self.t_factor = 0.0
        #: another model: the A/B's round-0 benches started while the factor measures, and
        #: the selection (matrices, paths, modes) all its benches then run with (``prestart``)
        self.pre: Prestarted | None = None
        self.broad: tuple | None = None

    def start(self) -> Confirmation:
        if self.started:
            return self
        self.started = True
        for m in self.matrices:
            todo, gate = pending(self.run_dir, m, self.baselines, self.arch,
                                 self.settings, self.echo)
            if todo is not None:
                self.todo[m] = todo
            if gate.models is not None:
                self.models[m] = gate.models
        for stale in (self.run_dir / "ab").rglob("*.time.json"):  # an earlier job's (--overwrite)
            stale.unlink(missing_ok=True)
        if self.models:
            t0 = time.perf_counter()
            self._start_factor()
            self.t_factor = time.perf_counter() - t0
        elif self.todo:
            self._start_early()
        return self

    def _start_early(self) -> None:
        """Same-model matrices only: their rows are known from the gates, so the A/B runs
        now in a thread, its benches starting up while the caller works (the job's ppl
        step) and measuring from ``finish()`` on (``pipeline.HeldRunner``); its lines are
        printed then."""
        held, lines = HeldRunner(self.runner), DeferredEcho(self.echo)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-ab")
        future = pool.submit(self._ab, commit_groups(self.todo), {}, held, lines)
        pool.shutdown(wait=False)
        self.early = (held, future, lines)

    def _foreign(self) -> dict[str, Pending]:
        return {m: self.todo[m] for m in self.models if m in self.todo}

    def _not_judged(self, exc: BaseException) -> None:
        ref, here = next(iter(self.models.values()))
        self.echo(f"harness job: speed on {here!r} not judged (baseline recorded on {ref!r}): "
                  f"the baseline's commit could not be measured here: {one_line(exc)}; its "
                  "timing rows stay TIMING_NOT_COMPARABLE")
        for m in self.models:
            self.todo.pop(m, None)
        self.factor = None

    def _start_factor(self) -> None:
        """Plan the machine factor's benches and start them (``projection_step``); where
        the baseline's commit cannot be measured here, one line says why and the foreign
        matrices are dropped (their timing rows stay TIMING_NOT_COMPARABLE)."""
        foreign, run_dir = self._foreign(), self.run_dir
        try:
            if dirty(self.repo):
                raise ValueError("uncommitted changes under harness/: the measured code is "
                                 "not a commit")
            plugins = run_plugins(run_dir, foreign)
            plan = sample_plan({m: p.result for m, p in foreign.items()}, self.settings,
                               row_commit, {m: p.base_commit for m, p in foreign.items()})
            if plan:
                self.factor = FactorBenches(
                    plan, repo=self.repo, work_dir=run_dir / "ab" / "projection",
                    runner=current_side_plugins(self.runner, plugins, self.repo),
                    echo=self.echo,
                    universe={m: [v.current for v in p.result.verdicts
                                  if v.current is not None] for m, p in foreign.items()},
                    bench_settings=factor_bench_settings(self.settings)).start()
        except EXPECTED_ERRORS as exc:
            self._not_judged(exc)

    def _project(self) -> dict[tuple[str, Key], ResultRow]:
        """Measure the factor, then project and screen each foreign matrix: fill its
        ``projected`` and the rows its screen sends to A/B; the rows measured here."""
        t0 = time.perf_counter()
        measured: dict = {}
        try:
            if self.factor is not None:
                self._prestart()
                measured = self.factor.collect()
        except EXPECTED_ERRORS as exc:
            self._not_judged(exc)
        self.seconds["machine factor"] = self.t_factor + time.perf_counter() - t0
        self.seconds.update(bench_timeline([self.run_dir / "ab" / "projection"],
                                           "machine factor"))
        for m, p in self._foreign().items():
            ref, here = self.models[m]
            p.projected = project(p.result, m, measured, self.settings, reference_model=ref,
                                  runner_model=here)
            p.slow = p.projected.screened
            self.echo(f"harness job: {m} on {here!r} against the {ref!r} baseline: "
                      f"{p.projected.projection.factors_text()}; {len(p.slow)} row(s) beyond "
                      f"the {self.settings.ab_screen:.1%} screen go to A/B")
        return measured

    def _prestart(self) -> None:
        """Start the A/B's round-0 benches without rows while the factor measures
        (``prestart.start_round0``; not with ``ab_screen_round`` 1, whose round 0 is the
        readings taken before); where that fails, one line says so and the A/B starts
        its benches after the screen."""
        if not can_prestart(self.runner) or self.settings.ab_screen_round:
            return
        try:
            broad = broad_selection(self.factor.plan)
            self.pre = start_round0(self.runner, self.repo, self.run_dir / "ab", self.factor.plan,
                                    broad, run_plugins(self.run_dir, broad[0]))
            self.broad = broad
        except EXPECTED_ERRORS as exc:
            self.echo(f"harness job: the A/B's benches start after the screen: {one_line(exc)}")

    def _close_pre(self) -> None:
        if self.pre is not None:
            self.pre.close()
            self.pre = None

    def finish(self) -> dict[str, int | None]:
        self.start()
        try:
            measured = self._project() if self.models else {}
        finally:
            if self.factor is not None:        # what it still holds (the early A/B goes on)
                self.factor.close()
        out: dict[str, int | None] = dict.fromkeys(self.matrices)
        todo, run_dir = self.todo, self.run_dir
        t0 = time.perf_counter()
        if self.early is not None:
            held, future, lines = self.early
            lines.flush()                      # what it said so far; then it speaks as it goes
            held.open()
            readings, heads = future.result()
            self.early = None
        else:
            try:
                readings, heads = self._ab(commit_groups(todo), measured)
            finally:
                self._close_pre()
        self.seconds["A/B"] = time.perf_counter() - t0
        self.seconds.update(bench_timeline([d for d in sorted((run_dir / "ab").glob("*"))
                                            if d.is_dir() and d.name != "projection"], "A/B"))
        head = None
        for m, p in todo.items():
            if m in readings or p.projected is not None:
                if m not in heads and head is None:
                    head = _head(self.repo)
                out[m] = store_readings(run_dir, m, p, readings.get(m, {}),
                                        heads.get(m) or head or "", self.rounds, self.echo,
                                        seeded=self.seeded)
        return out

    def _ab(self, groups: dict, measured: Mapping, runner: BenchRunner | None = None,
            echo: Callable[[str], None] | None = None) -> tuple[dict[str, dict], dict[str, str]]:
        """One compare of every group's rows against its baseline commit; per matrix its
        readings (key -> (reading, base sha)) and the head measured. ``runner`` and
        ``echo``: the Confirmation's unless given (``_start_early``'s)."""
        readings: dict[str, dict] = {}
        heads: dict[str, str] = {}
        if not groups:
            return readings, heads
        todo, repo, run_dir = self.todo, self.repo, self.run_dir
        members = [mv for group in groups.values() for mv in group]
        matrices_ab = list(dict.fromkeys(m for m, _ in members))
        broad = self.broad if runner is None and self.broad and set(matrices_ab) <= set(
            self.broad[0]) else None
        if broad:                  # every bench the command its round-0 bench started with
            matrices_ab, runner = list(broad[0]), self.pre
        runner, echo = runner or self.runner, echo or self.echo
        try:
            if dirty(repo):
                raise ValueError("uncommitted changes under harness/: the measured code is "
                                 "not a commit")
            head = resolve_revision(repo, "HEAD")
            shas = _reachable(repo, groups, echo)
            groups = {c: g for c, g in groups.items() if c in shas}
            if not groups:
                raise ValueError("no baseline commit of these rows is in this repository")
            members = [mv for group in groups.values() for mv in group]
            plugins = run_plugins(run_dir, matrices_ab)
            universe = [v.current for m in matrices_ab for v in todo[m].result.verdicts
                        if v.current is not None]
            parts = [a_part(shas[c], [v for _, v in group], universe, matrices_ab, broad)
                     for c, group in groups.items()] if len(groups) > 1 else []
            filt, paths, modes, _, only = selection([v.current for _, v in members], universe)
            if broad:                                  # the one selection, the rows exact
                filt, paths, modes = None, broad[1], broad[2]
            outcome = compare(next(iter(shas.values())), head, self.settings,
                              work_dir=run_dir / "ab" / "+".join(matrices_ab), repo=repo,
                              matrix=",".join(matrices_ab), filter=filt, paths=paths,
                              rows=only, modes=modes, rounds=self.rounds, confirm=False,
                              runner=current_side_plugins(runner, plugins, repo),
                              echo=echo, a_parts=parts,
                              seeds=self._seeds(members, measured),
                              decide=[v.key for _, v in members],
                              worktree_of=self.pre.trees.made if broad else None)
        except EXPECTED_ERRORS as exc:
            echo(f"harness job: A/B of {', '.join(matrices_ab)} not done, its verdicts "
                 f"stand: {one_line(exc)}")
            return readings, heads
        got = {(v.row.matrix, *v.key): v for v in outcome.result.verdicts}
        for c, group in groups.items():
            for m, v in group:
                readings.setdefault(m, {})[v.key] = (
                    reading_of(m, v, got, outcome.extended, self.settings.alpha), shas[c])
                heads[m] = head
        return readings, heads

    def _seeds(self, members: list, measured: Mapping) -> dict[str, list] | None:
        """With ``ab_screen_round`` 1, round 0 of both sides where every row to confirm was
        measured at its baseline commit by the machine factor (another GPU model,
        ``projection_sample`` 0), and measured there and in the job's bench without error:
        side A those readings, side B the job's own; else None (every round measured).
        Those readings are the ones the screen compared to choose the rows, so on the rows
        it chose their ratio leans the way they moved (an unchanged H100's rounds 0 read
        +2.1..2.7% against -0.8..+1.0% for its later rounds, docs/measurement.md §16.10):
        the default (0) measures every round."""
        if not self.settings.ab_screen_round or self.rounds < 2 or not members or not all(
                m in self.models and (m, v.key) in measured
                and measured[(m, v.key)].status == "ok" and v.current.status == "ok"
                for m, v in members):
            return None       # a reading that failed is no round: every round measured
        self.seeded = True
        return {"A": [measured[(m, v.key)] for m, v in members],
                "B": [v.current for _, v in members]}

    def close(self) -> None:
        if self.factor is not None:
            self.factor.close()
        self._close_pre()
        if self.early is not None:             # not finished: its benches are killed
            held, future, lines = self.early
            self.early = None
            held.cancel()
            with contextlib.suppress(Exception):
                future.result()
            lines.flush()                      # its lines, the one saying why included

    def __enter__(self) -> Confirmation:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ab_confirm(run_dir: Path, matrices: list[str], **kw) -> dict[str, int | None]:
    """A/B the failing SLOWER rows and the screened rows of each of ``matrices`` in
    ``run_dir``, each against the commit its baseline row was measured at (the row's
    ``commit``; the baseline's own where the row has none): one ``compare`` for the rows
    of all matrices, its A side in one part per such commit (one set of bench processes:
    their start-up is most of an A/B's cost). Per matrix its new exit code, or None when
    there was nothing to confirm or it could not be done (said in one line); a matrix
    whose rows only partly could be measured keeps the verdicts of the others.

    A matrix whose baseline is another GPU model's is first projected onto this runner
    (the machine factor measured here, ``projection_step``), its screened rows then
    confirmed the same way. Keywords: ``Confirmation``'s (``baselines``, ``arch``,
    ``settings``, ``rounds`` (3), ``repo``, ``runner``, ``echo``; ``seconds`` receives
    the wall time of each part, "machine factor" and "A/B")."""
    with Confirmation(run_dir, matrices, **kw) as conf:
        return conf.start().finish()


def _head(repo: Path) -> str:
    """HEAD's sha, or "" where git cannot say (the record then names no current commit)."""
    try:
        return resolve_revision(repo, "HEAD")
    except EXPECTED_ERRORS:
        return ""


def _reachable(repo: Path, groups: Mapping, echo: Callable[[str], None]) -> dict[str, str]:
    """Each group's baseline commit resolved (commit -> sha); a commit that cannot be (a
    shallow clone without it) is left out with one line: its rows keep their verdicts,
    the other commits' rows are still measured."""
    shas = {}
    for commit, group in groups.items():
        try:
            shas[commit] = resolve_revision(repo, commit)
        except EXPECTED_ERRORS as exc:
            echo(f"harness job: A/B of the {len(group)} row(s) of baseline commit "
                 f"{commit[:12]} not done, their verdicts stand: {one_line(exc)}")
    return shas


def ab_confirm_matrix(run_dir: Path, matrix: str, **kw) -> int | None:
    """``ab_confirm`` of one matrix: its new exit code, or None."""
    return ab_confirm(run_dir, [matrix], **kw)[matrix]
