"""The A/B engine behind ``harness compare`` and ``harness job``'s confirmation: two sides
(a stored run, or a revision measured here in a git worktree), interleaved rounds of their
benches pipelined by ``bench_runner``, margins from the rounds' own spread, extra rounds
for the rows they leave undecided, then one gate of B against A (the command's module
docstring, ``harness.commands.compare``, says it in full).

Extension point: ``runner`` (a ``revisions.BenchRunner``) measures one revision's bench.
"""


from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from ..config import Settings
from ..errors import CompareError
from ..reports.ab_confirm import apply_ab, record_for
from ..reports.comparison import (
    compare_runs,
    extended_margins,
    pool_rows,
    round_margins,
    undecided,
)
from ..reports.gate import stored_remeasure
from ..reports.gate_record import stored_partial
from ..reports.verdicts import GateResult
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import Run, load_run
from .bench_runner import bench_paths, bench_rows, run_pipelined
from .revisions import (  # noqa: F401  (BenchRequest, bench_command, GitMissing: re-exported)
    BenchRequest,
    BenchRunner,
    GitMissing,
    bench_command,
    case_filter,
    resolve_revision,
    subprocess_runner,
    worktrees,
)


@dataclass(frozen=True)
class Side:
    spec: str
    label: str
    revision: str = ""          # set when measured here
    run: Run | None = None      # set when read from disk


@dataclass(frozen=True)
class CompareOutcome:
    result: GateResult
    a_rows: tuple[ResultRow, ...]
    b_rows: tuple[ResultRow, ...]
    a: Side
    b: Side
    #: rows measured in more rounds than ``rounds`` (undecided after them): key -> rounds
    extended: Mapping[Key, int] = field(default_factory=dict)


def resolve_side(spec: str, repo: Path) -> Side:
    if Path(spec).exists():
        try:
            run = load_run(spec)
        except SchemaError as exc:
            raise CompareError(str(exc)) from None
        return Side(spec, run.label, run=run)
    sha = resolve_revision(repo, spec)
    return Side(spec, f"{spec}@{sha[:10]}" if spec != sha else sha[:12], revision=sha)


def compare(
    a_spec: str, b_spec: str, settings: Settings, *, work_dir: Path, repo: Path = Path("."),
    matrix: str = "production", filter: str | None = None, paths: Sequence[str] = (),
    modes: Sequence[str] = (), rounds: int = 3, runner: BenchRunner = subprocess_runner,
    echo: Callable[[str], None] = print, strict_env: bool = False, confirm: bool = True,
    rows: Sequence[tuple[str, str]] = (),
) -> CompareOutcome:
    """Gate B against A (A is the baseline side). Measured rounds land in ``work_dir/runs``.

    Revisions are measured in worktrees (``rounds`` interleaved rounds, margins from
    their A/A spread, AMBIGUOUS rows re-measured in one more interleaved round; the
    rounds' benches pipelined by ``bench_runner.run_pipelined`` when ``runner`` can:
    the next one starts up while one measures); then
    ``reports.comparison.compare_runs`` applies the environment policy and the gate.
    ``rows`` ((case_id, path) pairs, ``BenchRequest.rows``) limits each bench to those
    rows, where ``filter`` and ``paths`` would select every path on every case given (the
    AMBIGUOUS round measures exactly its rows either way).
    A stored B replays the confirmations its bench stored. ``confirm=False`` skips the
    extra round: the pooled rounds' verdicts stand (``harness job``'s A/B, where one more
    round of a path-wide regression costs ~55 s on the H200 and decides nothing new).
    """
    if rounds < 1:
        raise CompareError(f"--rounds must be >= 1, got {rounds}")
    a, b = resolve_side(a_spec, repo), resolve_side(b_spec, repo)
    measured = [s for s in (a, b) if s.revision]
    rounds_of: dict[str, list[list[ResultRow]]] = {"A": [], "B": []}
    firsts: dict[str, Run] = {}       # a measured side's first round: its environment and settings

    def measure(plan, rounds_: Sequence[int], sub, filt: str | None, p: Sequence[str],
                m: Sequence[str], only: Sequence[tuple[str, str]]) -> list[tuple[str, Run]]:
        """Interleaved rounds (A B, then B A, ...) of ``plan``, pipelined by
        ``bench_runner.run_pipelined`` (the next bench starts up while one measures);
        ``sub(r)`` names a round's folder. Returns (label, run) in measuring order."""
        jobs = [(sub(r), label, side, BenchRequest(label, side.revision, tree,
                                                   work_dir / "runs" / sub(r) / label, matrix,
                                                   r, filt, tuple(p), tuple(m),
                                                   rows=tuple(only)))
                for r in rounds_ for label, side, tree in (plan if r % 2 == 0 else plan[::-1])]
        for *_, req in jobs:
            if req.out_dir.exists():
                shutil.rmtree(req.out_dir)
        run_pipelined(
            runner, [req for *_, req in jobs],
            on_start=lambda i: echo(f"compare: round {jobs[i][0]}, {jobs[i][1]} = "
                                    f"{jobs[i][2].label}"),
            on_done=lambda i: progress.update(1) if progress is not None else None)
        got = []
        for name, label, _, req in jobs:
            try:
                got.append((label, load_run(req.out_dir)))
            except SchemaError as exc:
                raise CompareError(f"bench of {label} round {name} left no readable results: "
                                   f"{exc}") from None
        return got

    progress = None
    with contextlib.ExitStack() as stack:
        plan = []
        if measured:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-compare-")))
            trees = stack.enter_context(
                worktrees(repo.resolve(), [s.revision for s in measured], tmp))
            plan = [(lbl, s, trees[s.revision]) for lbl, s in (("A", a), ("B", b)) if s.revision]
            # one bench per revision per round: a bar with the ETA of the rounds left
            progress = stack.enter_context(tqdm(total=rounds * len(plan), unit="bench",
                                                desc="compare", dynamic_ncols=True))
            for label, run in measure(plan, range(rounds), lambda r: f"round{r}", filter,
                                      paths, modes, rows):
                rounds_of[label].append(list(run.rows))
                firsts.setdefault(label, run)
            progress.close()
            progress = None
        margins: dict[Key, float] = {}
        for side_rounds in rounds_of.values():
            for k, v in round_margins(side_rounds, settings.noise_margin_floor).items():
                margins[k] = max(v, margins.get(k, 0.0))
        a_rows = pool_rows(rounds_of["A"]) if a.revision else list(a.run.rows)
        b_rows = pool_rows(rounds_of["B"]) if b.revision else list(b.run.rows)
        run_a = a.run if a.run is not None else firsts["A"]
        run_b = b.run if b.run is not None else firsts["B"]
        extended: dict[Key, int] = {}
        if len(plan) == 2 and settings.ab_extra_rounds:
            first = compare_runs(a_rows, b_rows, run_a, run_b, settings, a_label=a.label,
                                 b_label=b.label, margins=margins, strict_env=strict_env,
                                 echo=lambda line: None)
            keys = undecided(first, settings)
            if keys:
                wanted, more = set(keys), range(rounds, rounds + settings.ab_extra_rounds)
                echo(f"compare: {len(keys)} undecided row(s) (moved beyond "
                     f"{settings.ab_screen:.1%}, not confirmed): {len(more)} more round(s) "
                     "of those rows")
                picked = [r for r in b_rows if r.key in wanted]
                for label, run in measure(plan, more, lambda r: f"round{r}",
                                          case_filter(picked, b_rows),
                                          bench_paths({k[1] for k in keys}),
                                          sorted({k[2] for k in keys}), bench_rows(keys)):
                    rounds_of[label].append([r for r in run.rows if r.key in wanted])
                margins.update(extended_margins(rounds_of["A"], rounds_of["B"], keys,
                                                settings))
                a_rows, b_rows = pool_rows(rounds_of["A"]), pool_rows(rounds_of["B"])
                extended = dict.fromkeys(keys, rounds + len(more))

        remeasure = None
        if len(plan) == 2 and confirm:
            def remeasure(keys: list[Key]):
                wanted = set(keys)
                picked = [r for r in b_rows if r.key in wanted]
                got = dict(measure(plan, [rounds], lambda r: "remeasure",
                                   case_filter(picked, b_rows), bench_paths({k[1] for k in keys}),
                                   sorted({k[2] for k in keys}), bench_rows(keys)))
                return ([r for r in got["A"].rows if r.key in wanted],
                        [r for r in got["B"].rows if r.key in wanted])
        elif b.run is not None:
            # a stored B: replay the confirmations its bench stored (same verdicts as the bench's)
            remeasure = stored_remeasure(b.run.confirmations)
        result = compare_runs(
            a_rows, b_rows, run_a, run_b, settings,
            a_label=a.label, b_label=b.label, margins=margins, a_stored=a.run is not None,
            remeasure=remeasure, strict_env=strict_env, echo=echo,
            partial=b.run is not None and stored_partial(b.run.metas),   # as its bench gated it
            notes=(f"noise margins from {rounds} interleaved rounds per side (A/A spread)",)
            + ((f"{len(extended)} undecided row(s) measured in "
                f"{rounds + settings.ab_extra_rounds} rounds, their margins the standard "
                "error of the rounds' means",) if extended else ()))
        if a.run is not None and b.run is not None:
            # a stored run against its stored baseline: replay the job's A/B readings
            for meta in b.run.metas.values():
                result = apply_ab(result, record_for(meta, a.run.environment.commit))
    return CompareOutcome(result, tuple(a_rows), tuple(b_rows), a, b, extended)
