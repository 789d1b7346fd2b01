"""``harness job`` on a GPU model the baseline was not recorded on: the machine factor,
measured here (the engine of ``reports.projection``).

For the gated timing rows of a matrix whose baseline is another model's (its gate read
them TIMING_NOT_COMPARABLE), ``project`` measures a sample of each class (path, mode, M
bucket; ``projection_sample`` rows) on this runner at the commit each sampled row's
baseline was measured at: one ``harness bench`` per such commit, in a git worktree (the
build cache is shared), every matrix's sample of that commit in one process. From those
readings it derives each class's machine factor, projects every gated row's baseline onto
this runner, and screens the run against the projection (``reports.ab_confirm.
screen_keys``): the rows it returns to confirm are then measured A/B against the
baseline's commit like any other (``harness.engines.ab_step``); the others get a
``projected`` reading (SAME, their change against the projection).

Cost: one bench process per baseline commit (two for the sm90 baselines of 2026-12-05),
measuring ``projection_sample`` rows of each class (36 graph rows of production and 40 of
swiglu at 4; every gated row, 224, at the default 0), on top of the A/B of the rows the
screen sends. At 4, the rows whose own model difference departs from their class's factor
went to A/B: 43 rows, 9 benches, 56 s on an unchanged H100 run (e1 of 2026-12-05); with
every row measured here each row is screened against its own reading on this runner, as
the same-model job screens against its own model's baseline.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import Settings
from ..errors import CompareError
from ..reports.ab_confirm import moved_paths, screen
from ..reports.projection import (
    Projection,
    judged_rows,
    machine_factors,
    pick_sample,
    projected_baseline,
    projected_readings,
)
from ..reports.verdicts import GateResult, RowVerdict, Verdict
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import load_run
from .bench_runner import BenchRequest, bench_paths, bench_rows
from .pipeline import Pipeline
from .revisions import BenchRunner, case_filter, resolve_revision, worktrees


@dataclass
class Projected:
    """One matrix judged on this runner: the projection, the rows the screen sends to A/B
    and the projected readings (key -> (verdict, change)) of the others."""

    projection: Projection
    screened: list[RowVerdict]
    readings: Mapping[Key, tuple[str, float]] = field(default_factory=dict)
    #: the screen's own reading of each screened row against the projection (key ->
    #: (verdict, change, threshold)): what stands for a row whose A/B gives no reading
    screen_readings: Mapping[Key, tuple[str, float, float]] = field(default_factory=dict)
    #: the directions each screened row was sent for (``SLOWER`` / ``FASTER``: its own
    #: screen verdict, its path's move): an A/B call outside them is ``CONTRADICTED``
    directions: Mapping[Key, frozenset[str]] = field(default_factory=dict)


def sample_plan(results: Mapping[str, GateResult], settings: Settings,
                commit_of: Callable[[RowVerdict, str], str],
                base_commits: Mapping[str, str]) -> dict[str, list[tuple[str, RowVerdict]]]:
    """The rows to measure here, grouped by the commit of their baseline row:
    commit -> [(matrix, verdict)] (``commit_of(v, the matrix's baseline commit)``)."""
    plan: dict[str, list[tuple[str, RowVerdict]]] = {}
    for matrix, result in results.items():
        for v in pick_sample(judged_rows(result, settings), settings.projection_sample):
            plan.setdefault(commit_of(v, base_commits[matrix]), []).append((matrix, v))
    return plan


class FactorBenches:
    """The machine factor's benches: one per commit of ``plan``, of exactly its rows (graph
    and any other mode they are in), at that commit in a worktree, with ``bench_settings``
    (``--set KEY=VALUE`` each: ``factor_bench_settings``). Two steps: ``start()``
    makes the worktrees and starts the first benches, which start up and wait at their
    gates (``pipeline.Pipeline.prime``), so ``harness job`` can run its perplexity
    step meanwhile; ``collect()`` measures them all and returns the rows measured, by
    (matrix, key). ``close()`` (or leaving a ``with`` block) kills what is still held and
    removes the worktrees."""

    def __init__(self, plan: Mapping[str, Sequence[tuple[str, RowVerdict]]], *, repo: Path,
                 work_dir: Path, runner: BenchRunner,
                 universe: Mapping[str, Sequence[ResultRow]],
                 echo: Callable[[str], None], bench_settings: Sequence[str] = ()) -> None:
        self.plan, self.repo, self.work_dir, self.runner = plan, repo, work_dir, runner
        self.universe, self.echo, self.bench_settings = universe, echo, tuple(bench_settings)
        self.stack = contextlib.ExitStack()
        self.reqs: list[BenchRequest] = []
        self.pipeline: Pipeline | None = None

    def start(self) -> FactorBenches:
        if self.pipeline is not None:
            return self
        plan, repo = self.plan, self.repo
        try:
            shas = {commit: resolve_revision(repo, commit) for commit in plan}
            tmp = self.stack.enter_context(
                tempfile.TemporaryDirectory(prefix="harness-projection-"))
            trees = self.stack.enter_context(
                worktrees(repo.resolve(), list(dict.fromkeys(shas.values())), Path(tmp)))
            for commit, members in plan.items():
                matrices = list(dict.fromkeys(m for m, _ in members))
                rows = [v.current for _, v in members]
                everything = [r for m in matrices for r in self.universe.get(m, ())]
                self.reqs.append(BenchRequest(
                    "A", shas[commit], trees[shas[commit]],
                    self.work_dir / f"base-{commit[:12]}", ",".join(matrices), 0,
                    case_filter(rows, universe=everything),
                    tuple(bench_paths({v.path for _, v in members})),
                    tuple(sorted({v.mode for _, v in members})),
                    rows=bench_rows(v.key for _, v in members), settings=self.bench_settings))
            self.pipeline = self.stack.enter_context(Pipeline(self.runner, self.reqs))
            self.pipeline.prime()
        except BaseException:
            self.close()
            raise
        return self

    def collect(self) -> dict[tuple[str, Key], ResultRow]:
        self.start()
        plan, reqs = self.plan, self.reqs
        got: dict[tuple[str, Key], ResultRow] = {}
        try:
            self.pipeline.run(on_start=lambda i: self.echo(
                f"harness job: machine factor: {len(plan[list(plan)[i]])} row(s) at the "
                f"baseline's commit {reqs[i].revision[:12]} on this runner"))
            for members, req in zip(plan.values(), reqs, strict=True):
                try:
                    run = load_run(req.out_dir)
                except SchemaError as exc:
                    raise CompareError(f"the bench at {req.revision[:12]} left no readable "
                                       f"results: {exc}") from None
                # each commit's own rows only: a bench records the rows of its cases that
                # it was not asked for as unavailable, which must not overwrite another
                # commit's reading of them (n4 of 2026-12-06: f33d13cd33f1's bench recorded
                # acffbe3b1f93's marlin_asym rows so; only the benches' order kept them)
                wanted = {(m, v.key) for m, v in members}
                got.update({(r.matrix, r.key): r for r in run.rows
                            if (r.matrix, r.key) in wanted})
        finally:
            self.close()
        return got

    def close(self) -> None:
        self.stack.close()

    def __enter__(self) -> FactorBenches:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def factor_bench_settings(settings: Settings) -> tuple[str, ...]:
    """The ``--set`` arguments of the machine factor's benches: ``projection_min_samples``,
    ``projection_warmup_ms`` and ``projection_accuracy_runs`` where set (0: the bench's
    own). Only settings that the baseline commits' benches know (all three exist since
    before the sm90 baselines' commits), and none reaches an A/B bench: the factor's
    readings screen, the A/B's rounds decide."""
    pairs = (("min_samples", settings.projection_min_samples),
             ("warmup_ms", settings.projection_warmup_ms),
             ("accuracy_runs", settings.projection_accuracy_runs))
    return tuple(f"{key}={value:g}" for key, value in pairs if value)


def project(result: GateResult, matrix: str, measured: Mapping[tuple[str, Key], ResultRow],
            settings: Settings, *, reference_model: str, runner_model: str) -> Projected:
    """The projection of one matrix from the rows measured here (see the module
    docstring): machine factors, the screen, the projected readings."""
    judged = judged_rows(result, settings)
    mine = {k: r for (m, k), r in measured.items() if m == matrix}
    factors = machine_factors(judged, mine)
    projected = projected_baseline(judged, factors, mine)
    have = {r.key for r in projected}
    current = [v.current for v in judged if v.key in have]
    screened, gate, wide = projected_screen(current, projected, settings)
    projection = Projection(reference_model, runner_model, factors,
                            settings.projection_sample,
                            tuple(sorted("|".join(k) for k in mine if k in have)))
    return Projected(projection, [v for v in judged if v.key in screened],
                     projected_readings(current, projected, screened),
                     {v.key: (v.verdict.value, v.time_change, v.threshold)
                      for v in gate.verdicts if v.key in screened and v.current is not None},
                     screen_directions(gate, wide, screened))


def projected_screen(current: Sequence[ResultRow], projected: Sequence[ResultRow],
                     settings: Settings) -> tuple[set[Key], GateResult, Settings]:
    """The foreign screen of ``current`` against its projected baseline: the keys it sends
    to A/B, the gate it read them from, and the settings it read with. Both ways, each
    path against its own projection (each class's factor is removed already), the path
    screen widened to ``ab_screen``: a path's median against factors of sampled rows
    scatters by ~1% (two fresh H100s), and a 1% path screen sent 62 of 168 production
    rows of an unchanged H100 run to A/B (2026-12-05)."""
    wide = replace(settings, ab_path_screen=max(settings.ab_path_screen, settings.ab_screen))
    screened, gate = screen(current, projected, wide, against_others=False, both_ways=True)
    return screened, gate, wide


def screen_directions(gate: GateResult, settings: Settings,
                      screened: set[Key]) -> dict[Key, frozenset[str]]:
    """Per screened row, the directions it was sent for: its own screen verdict (SLOWER or
    FASTER) and the direction its (path, mode) moved in, where the path moved beyond the
    path screen. A real slowdown is sent as slower by one or the other; a row the screen
    sent as faster alone cannot be failed by an A/B round that happens to read it slower
    (t2, 962674c: -2.2% on the screen, +2.76% on three A/B rounds, the same row +0.15%
    and +0.55% on two other runs: per-process bimodality, docs/measurement.md §16.13)."""
    moved = moved_paths(gate.verdicts, settings, against_others=False, both_ways=True)
    out = {}
    for v in gate.verdicts:
        if v.key not in screened:
            continue
        dirs = {v.verdict.value} & {Verdict.SLOWER.value, Verdict.FASTER.value}
        move = moved.get((v.path, v.mode))
        if move is not None:
            dirs.add(Verdict.SLOWER.value if move > 0 else Verdict.FASTER.value)
        out[v.key] = frozenset(dirs)
    return out
