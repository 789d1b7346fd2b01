"""``harness bisect GOOD BAD``: the first commit that made the measured rows slower or less
accurate than at GOOD.

The commits after GOOD up to BAD on BAD's first-parent line (``git log --first-parent
GOOD..BAD``) are searched by halving: each commit visited is checked out in a worktree
and measured by its own code (``python -m harness bench --matrix M [--filter F] [--paths
p,q] [--mode m] [--plugin FILE]... --no-compare``; the JIT build cache is shared), then
judged against GOOD by the harness's gate, as ``harness compare`` judges B against A
(noise margins of ``<baselines>/<arch>/<matrix>.json``). Rows the gate finds AMBIGUOUS
(and SLOWER rows, before they count) are measured again, GOOD and the commit interleaved,
at most ``--remeasure`` times per commit; a row still AMBIGUOUS then counts as not
regressed. A commit is regressed when a row's verdict is one ``--look-for`` names:
speed = SLOWER, accuracy = WORSE_ACCURACY or LESS_ACCURATE, errors = ERROR, MISSING,
NONDETERMINISTIC or LOST_DISPATCH. Every path's row counts, in every mode measured
(eager and CPU rows are confirmed like graph rows: gate_eager_speed = 1); peers never
do: pick what to bisect with --paths and --mode (graph rows are the stable ones on a
GPU). BAD is taken to be bad, as git bisect does, and measured only when the search ends
on it. A commit whose bench fails is skipped.

Prints each visit, then the first regressed commit with its evidence (rows, ratio to
GOOD, 95% CIs, p, threshold), and the cost: commits visited and measured, benches, wall time. Writes
``bisect.json`` and, under ``results/``, the first run of each commit measured (a
results root for ``harness history --results``) to ``--out`` (default
``results/bisect/<GOOD>_<BAD>``). A plugin path relative to the repository is read from
each commit's own checkout. Exit 0: a commit named; 1: BAD is not regressed against
GOOD; 2: bad input, or skipped commits left no single answer.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from ..engines.bisect_search import LOOK_FOR, Bisector, Outcome, Visit
from ..engines.revisions import (
    BenchRunner,
    WorktreePool,
    first_parent,
    is_ancestor,
    resolve_revision,
    subprocess_runner,
)
from ..errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, CompareError
from ..reports.verdicts import RowVerdict
from ..results.baseline import BaselineNotFoundError
from ..results.models import load_for_model
from ..results.schema import SchemaError
from ..results.store import Run, write_json
from .common import add_settings_args, csv_list, plain, settings_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bisect", help="find the first commit that made rows slower or less "
                       "accurate than at GOOD", description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("good", help="a revision measured as the reference")
    p.add_argument("bad", help="a later revision, taken to be regressed")
    p.add_argument("--matrix", default="production", help="matrix to measure (default production)")
    p.add_argument("--filter", default=None, help="case filter passed to harness bench")
    p.add_argument("--paths", default=None, help="comma-separated paths passed to harness bench")
    p.add_argument("--mode", default=None, help="comma-separated timing modes (graph on a GPU)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                   help="passed to harness bench (repeatable); a relative file is each "
                        "commit's own")
    p.add_argument("--remeasure", type=int, default=2,
                   help="re-measurements of AMBIGUOUS/SLOWER rows per commit (default 2)")
    p.add_argument("--look-for", default="speed,accuracy",
                   help=f"what makes a commit regressed: {','.join(LOOK_FOR)} "
                        "(default speed,accuracy)")
    p.add_argument("--repo", default=".", help="git repository (default .)")
    p.add_argument("--baselines", default="baselines",
                   help="baselines root: per-row noise margins (default baselines/)")
    p.add_argument("--out", default=None,
                   help="output directory (default results/bisect/<GOOD>_<BAD>)")
    add_settings_args(p)
    p.set_defaults(func=run)


def look_for(text: str):
    """The verdicts ``--look-for`` names (one-line error for an unknown word)."""
    names = csv_list(text)
    bad = [n for n in names if n not in LOOK_FOR]
    if bad or not names:
        raise CompareError(f"--look-for {text!r}: choose from {', '.join(LOOK_FOR)}")
    return frozenset().union(*(LOOK_FOR[n] for n in names))


def margins_from(baselines: Path, echo=print):
    """A ``margins(run)`` reading the noise margins of the run's arch and matrices."""
    def margins(run: Run):
        arch = run.environment.arch
        try:
            base = load_for_model(baselines, arch, run.environment.gpu_name, run.matrices)
        except (BaselineNotFoundError, SchemaError, ValueError) as exc:
            echo(f"harness bisect: no baseline noise margins ({exc}); threshold = min_effect")
            return {}
        return base.margins
    return margins


def evidence_lines(hits: list[RowVerdict]) -> list[str]:
    """One line per regressed row: verdict, row, ratio to GOOD and both CIs, or rel_err."""
    def ci(row) -> str:
        if row is None or not math.isfinite(row.time_us_ci_lo):
            return ""
        return f" [{row.time_us_ci_lo:.2f}, {row.time_us_ci_hi:.2f}]"

    out = []
    for v in hits:
        what = f"  {v.verdict!s:14} {v.case_id} {v.path} {v.mode}: "
        if math.isfinite(v.time_change) and v.verdict.value == "SLOWER":
            what += (f"x{1 + v.time_change:.4f} ({v.time_change:+.2%}); GOOD "
                     f"{v.base_median_us:.2f} µs{ci(v.baseline)}, this {v.cur_median_us:.2f} µs"
                     f"{ci(v.current)} (95% CI); p={v.p_value:.2g}, threshold "
                     f"{v.threshold:.2%}" + (", confirmed by re-measurement" if v.remeasured
                                             else ""))
        else:
            what += v.reason
        out.append(what)
    return out


def _visit_line(v: Visit, total: int) -> str:
    where = "GOOD" if v.position < 0 else f"{v.position + 1}/{total}"
    head = f"harness bisect: [{where}] {v.commit.sha[:12]} {v.commit.subject[:50]}: "
    cost = f" ({v.benches} bench{'es' if v.benches != 1 else ''}, {v.seconds:.1f} s)"
    if v.state == "reference":
        return head + "measured (the reference)" + cost
    if v.state == "skipped":
        return head + f"SKIPPED, {v.problem}" + cost
    counts = {str(k): n for k, n in v.result.counts().items() if n}
    tail = f"; {v.ambiguous} row(s) still AMBIGUOUS, counted as not regressed" \
        if v.ambiguous else ""
    state = "REGRESSED" if v.state == "regressed" else "good"
    return head + f"{state} {counts}" + tail + cost


def _summary(outcome: Outcome) -> dict:
    def visit(v: Visit) -> dict:
        return {"commit": v.commit.sha, "subject": v.commit.subject, "state": v.state,
                "position": v.position, "benches": v.benches, "seconds": round(v.seconds, 2),
                "remeasures": v.remeasures, "ambiguous": v.ambiguous, "problem": v.problem,
                "verdicts": ({str(k): n for k, n in v.result.counts().items() if n}
                             if v.result else {}),
                "evidence": evidence_lines(list(v.hits))}
    return {"good": outcome.good.sha, "bad": outcome.candidates[-1].sha,
            "candidates": [c.sha for c in outcome.candidates],
            "first_bad": outcome.first_bad.commit.sha if outcome.first_bad else None,
            "among": [c.sha for c in outcome.among], "visits": [visit(v) for v in outcome.visits],
            "commits_visited": outcome.commits_visited,
            "commits_measured": outcome.commits_measured, "benches": outcome.benches,
            "seconds": round(outcome.seconds, 2)}


def bisect(good: str, bad: str, args: argparse.Namespace, *, work_dir: Path,
           runner: BenchRunner = subprocess_runner, echo=print) -> Outcome:
    """Resolve the range and search it (see the module docstring)."""
    wanted = look_for(args.look_for)
    repo = Path(args.repo).resolve()
    g, b = resolve_revision(repo, good), resolve_revision(repo, bad)
    if not is_ancestor(repo, g, b) or g == b:
        raise CompareError(f"GOOD {good} is not an ancestor of BAD {bad}: nothing to bisect")
    good_commit = first_parent(repo, g, last=1)[0]
    candidates = first_parent(repo, b, since=g)
    echo(f"harness bisect: GOOD {g[:12]} .. BAD {b[:12]}: {len(candidates)} commit(s) on the "
         f"first-parent line; matrix {args.matrix}" + (f", filter {args.filter!r}"
                                                        if args.filter else "")
         + (f", paths {args.paths}" if args.paths else "")
         + (f", modes {args.mode}" if args.mode else ""))
    with tempfile.TemporaryDirectory(prefix="harness-bisect-") as tmp, \
            WorktreePool(repo, Path(tmp)) as pool:
        engine = Bisector(repo, settings_from_args(args), work_dir=work_dir, pool=pool,
                          matrix=args.matrix, filter=args.filter, paths=csv_list(args.paths),
                          modes=csv_list(args.mode), plugins=args.plugin,
                          remeasure_max=max(0, args.remeasure), look_for=wanted,
                          margins=margins_from(Path(args.baselines), echo), runner=runner,
                          echo=echo)
        return engine.search(good_commit, candidates,
                             on_visit=lambda v: echo(_visit_line(v, len(candidates))))


def report(outcome: Outcome, work_dir: Path, echo=print) -> int:
    """Print the outcome and its cost, write ``bisect.json``; the exit code."""
    n = len(outcome.candidates)
    if outcome.first_bad is not None:
        v = outcome.first_bad
        echo(f"first regressed commit: {v.commit.sha} {v.commit.subject}")
        echo(f"evidence against GOOD {outcome.good.sha[:12]} ({len(v.hits)} row(s)):")
        for line in evidence_lines(list(v.hits)):
            echo(line)
        code = EXIT_PASS
    elif outcome.among:
        echo("no single answer: commits that could not be measured leave the first regressed "
             "commit among " + ", ".join(c.sha[:12] for c in outcome.among))
        code = EXIT_ERROR
    else:
        echo(f"BAD {outcome.candidates[-1].sha[:12]} is not regressed against GOOD "
             f"{outcome.good.sha[:12]}: no commit to name")
        code = EXIT_FAIL
    skipped = outcome.commits_visited - outcome.commits_measured
    echo(f"cost: {outcome.commits_visited} commits visited, {outcome.commits_measured} "
         f"measured (GOOD and {outcome.commits_measured - 1} of {n})"
         + (f", {skipped} skipped" if skipped else "")
         + f"; {outcome.benches} benches, {outcome.seconds:.1f} s wall")
    path = write_json(work_dir / "bisect.json", _summary(outcome))
    echo(f"wrote {path}; stored runs for harness history --results {work_dir / 'results'}")
    return code


def run(args: argparse.Namespace) -> int:
    out = (Path(args.out) if args.out else
           Path("results") / "bisect" / f"{args.good[:12]}_{args.bad[:12]}".replace("/", "_"))
    outcome = bisect(args.good, args.bad, args, work_dir=out)
    return report(outcome, out)
