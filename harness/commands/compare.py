"""``harness compare A B``: two result sets, or two git revisions measured here.

A side that names an existing CSV/directory is read as stored results. Any other side is
a git revision: it is checked out in a temporary ``git worktree`` and measured by running
``python -m harness bench --matrix M [--filter F] [--paths p,q] [--mode m,n] --out DIR``
inside it (``PYTHONPATH`` = the worktree), for ``rounds`` rounds, alternating the two
revisions (A B, B A, A B, ...) so drift of the GPU hits both alike. The rounds of a side
are pooled (samples concatenated), and their spread calibrates per-case noise margins.
A gating row those rounds leave undecided (SAME or AMBIGUOUS while its median moved
beyond the ``ab_screen`` setting) gets ``ab_extra_rounds`` more interleaved rounds of
those rows only, and is judged against the standard error of the difference of the
rounds' means (``reports.comparison.extended_margins``): one round's spread, the margin of
the other rows, does not shrink with rounds, so on a row that moves a few percent between
processes no number of rounds could confirm a 5% slowdown. AMBIGUOUS rows left after
that get one more interleaved round, restricted to their rows. The gating of the two sets
is ``harness.reports.comparison.compare_runs``; this module only measures.

Writes CSV, HTML and Markdown to ``--out`` (default ``results/compare/<A>_vs_<B>``, or
``<A>_vs_<B>-2``, ``-3`` ... where an earlier comparison is; an ``--out`` that holds one is
refused: a comparison never replaces another's files);
exit 0 when nothing regressed, 1 on a failing verdict, 2 on bad input or a refused
comparison.

Extension point: ``BenchRunner`` — any callable taking a ``BenchRequest`` and leaving
result CSVs under ``request.out_dir``; tests pass a fake one, the default runs the
subprocess above (``harness.commands.revisions``, shared with ``harness bisect``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
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
from ..reports.markdown import text_table
from ..reports.render import write_reports
from ..reports.verdicts import GateResult
from ..results.environment import STRICT_ENV_HELP
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import Run, load_run
from .bench_runner import bench_paths, bench_rows, run_pipelined
from .common import add_settings_args, csv_list, plain, settings_from_args
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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two result sets or two git revisions (B against A)",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="baseline side: result CSV/directory or git revision")
    p.add_argument("b", help="current side: result CSV/directory or git revision")
    p.add_argument("--out", default=None,
                   help="output directory (default: results/compare/<A>_vs_<B>)")
    p.add_argument("--matrix", default="production",
                   help="matrix to measure for revisions (default production)")
    p.add_argument("--filter", default=None, help="case filter passed to harness bench")
    p.add_argument("--paths", default=None, help="comma-separated paths passed to harness bench")
    p.add_argument("--mode", default=None,
                   help="comma-separated timing modes passed to harness bench")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved runs per revision (default 3)")
    p.add_argument("--repo", default=".", help="git repository holding the revisions (default .)")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    add_settings_args(p)
    p.set_defaults(func=run)


def _slug(text: str) -> str:
    """A directory-name version of a compare side (last two path parts, 12 chars each)."""
    parts = [p[:12] for p in Path(text).parts[-2:] if p not in ("/", ".", "..")] or ["x"]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))


def fresh_out(args: argparse.Namespace) -> Path:
    """Where this comparison's files go, never over an earlier comparison's: ``--out`` when
    it holds none (else a one-line refusal naming it), by default
    ``results/compare/<A>_vs_<B>``, or the first ``-2``, ``-3`` ... beside it that is free."""
    if args.out:
        out = Path(args.out)
        if (out / "compare.csv").exists():
            raise ValueError(f"--out {out} holds an earlier comparison (compare.csv); name "
                             "another folder or remove it")
        return out
    first = Path("results") / "compare" / f"{_slug(args.a)}_vs_{_slug(args.b)}"
    out, n = first, 1
    while (out / "compare.csv").exists():
        n += 1
        out = first.with_name(f"{first.name}-{n}")
    return out


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    out = fresh_out(args)
    outcome = compare(args.a, args.b, settings, work_dir=out, repo=Path(args.repo),
                      matrix=args.matrix, filter=args.filter, paths=csv_list(args.paths),
                      modes=csv_list(args.mode), rounds=args.rounds, strict_env=args.strict_env)
    files = write_reports(outcome.result, out, "compare",
                          title=f"compare {outcome.a.label} -> {outcome.b.label}",
                          rows=list(outcome.b_rows), labels=("A", "B"),
                          current_env=outcome.b.run.environment if outcome.b.run else None,
                          baseline_env=outcome.a.run.environment if outcome.a.run else None)
    print(text_table(outcome.result, changes_only=True))
    print(f"wrote {files.csv}, {files.html}, {files.markdown}")
    return outcome.result.exit_code


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
