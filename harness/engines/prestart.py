"""Benches started before their rows are known: the foreign job's A/B starts up while the
machine factor measures.

On a GPU model the baseline was not recorded on, ``harness job`` measures the machine
factor, screens, and only then knows the rows its A/B re-measures; the A/B's first bench
then waits for its process to start (python, torch, the CUDA context, the paths): 4-12 s
of every foreign job on the H100s of 2026-12-06 (docs/measurement.md §16.14-16.15),
beside 4 s for a same-model job, whose A/B starts up during its perplexity step.

``Prestarted`` wraps a pipelining runner (``bench_runner.SubprocessRunner``). Its
``prestart(req)`` starts a bench of ``req`` without rows (``BenchRequest.late``): the
process starts up and waits at its gate. When a request arrives at ``start`` that differs
from a held one only in its rows (and its worktree: a held bench runs in a worktree of the
same commit that this object keeps until ``close``), the held bench is given those rows
(``fill``) and handed over; any other request starts as usual (``pipeline.HeldBenches``,
which the A/B's extra rounds use the same way). Its worktrees
(``trees.made``) serve the A/B's compare too (``compare``'s ``worktree_of``). A bench started
too early measures what it would have measured: only the rows its file names
(``bench_rows.py``), with the selection (matrices, paths, modes, no case filter) that
the A/B's rounds all use on another model, so every bench of both sides runs the same
command. A held bench nobody asks for is killed at ``close``. What that selection costs
a bench is its other cases' rows, written ``unavailable`` without data or timing; what
the foreign job gains is its A/B's first start-up. Neither is measured on a GPU yet.

``ab_round0`` gives the requests of the A/B's first round as ``ab_step`` will make them,
for a given set of baseline commits (every commit the factor measures at, and HEAD);
``start_round0`` starts them. Where the screen sends rows of fewer commits than the
factor measured, the A side's folders differ and only HEAD's bench is taken.

Extension point: the wrapped ``runner``, which needs ``start``, ``release``, ``finish``,
``abort`` and ``fill``; ``reap`` where it has one.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..reports.verdicts import RowVerdict
from .ab_legs import a_folders, bench_dir
from .ab_plugins import current_side_plugins
from .bench_runner import BenchRequest, bench_paths
from .pipeline import HeldBenches, can_hold
from .revisions import WorktreePool, resolve_revision


def can_prestart(runner) -> bool:
    """Whether ``runner`` can hold a bench before its rows are known."""
    return can_hold(runner)


class Prestarted(HeldBenches):
    """``runner`` with benches started ahead of their requests (see the module docstring;
    the handing over is ``pipeline.HeldBenches``'). A context manager: leaving it (or
    ``close()``) kills the held benches that were never asked for, waits for the ones
    still exiting and removes its worktrees."""

    def __init__(self, runner, repo: Path) -> None:
        super().__init__(runner)
        self.tmp = tempfile.TemporaryDirectory(prefix="harness-prestart-")
        self.trees = WorktreePool(repo.resolve(), Path(self.tmp.name))

    def prestart(self, req: BenchRequest) -> None:
        """Start a bench of ``req`` (its rows ignored) in a worktree of its revision; it
        waits at its gate for ``start`` to hand it over."""
        tree = self.trees.add(req.revision)
        self.hold(req, self.runner.start(replace(req, rows=(), late=True, worktree=tree)))

    def close(self) -> None:
        super().close()
        self.reap()
        self.trees.__exit__(None, None, None)
        self.tmp.cleanup()

    def __enter__(self) -> Prestarted:
        return self


def broad_selection(plan: Mapping[str, Sequence[tuple[str, RowVerdict]]]) -> tuple:
    """(matrices, paths, modes) of the rows of the machine factor's ``plan`` (commit ->
    [(matrix, verdict)]): the selection every bench of the foreign A/B runs with, whatever
    rows it is given (the rows the screen sends are among these)."""
    members = [mv for group in plan.values() for mv in group]
    return (tuple(dict.fromkeys(m for m, _ in members)),
            tuple(bench_paths({v.path for _, v in members})),
            tuple(sorted({v.mode for _, v in members})))


def ab_round0(work_dir: Path, matrix: str, bases: Sequence[str], head: str, *,
              paths: Sequence[str], modes: Sequence[str]) -> list[BenchRequest]:
    """The benches of the A/B's round 0 as ``compare`` names them (``work_dir``/runs/
    round0/<leg>: one ``A@<sha12>`` per baseline commit where there are several, else
    ``A``, then ``B``), each of ``matrix`` with no case filter (the rows decide), without
    rows; the worktree is the caller's to set (``Prestarted.prestart`` does)."""
    folders = a_folders(bases if len(bases) > 1 else [])
    legs = [("A", sha, folder) for sha, folder in zip(bases, folders, strict=True)]
    return [BenchRequest(label, sha, Path(), bench_dir(work_dir, "round0", folder), matrix, 0,
                         None, tuple(paths), tuple(modes))
            for label, sha, folder in [*legs, ("B", head, "B")]]


def start_round0(runner, repo: Path, ab_dir: Path,
                 plan: Mapping[str, Sequence[tuple[str, RowVerdict]]], broad: tuple,
                 plugins: tuple[str, ...]) -> Prestarted:
    """A ``Prestarted`` over ``runner`` holding the A/B's round-0 benches (``ab_round0``:
    one per baseline commit of the factor's ``plan``, and HEAD's) with the ``broad``
    selection (``broad_selection``), under ``ab_dir``/<matrices>, the run's ``plugins``
    given as the A/B gives them (``ab_plugins.current_side_plugins``)."""
    matrices, paths, modes = broad
    bases = list(dict.fromkeys(resolve_revision(repo, c) for c in plan))
    head = resolve_revision(repo, "HEAD")
    pre = Prestarted(runner, repo)
    try:
        side = current_side_plugins(pre, plugins, repo)
        for req in ab_round0(ab_dir / "+".join(matrices), ",".join(matrices), bases, head,
                             paths=paths, modes=modes):
            side.prestart(req)
    except BaseException:
        pre.close()
        raise
    return pre
