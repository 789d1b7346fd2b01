"""``harness compare A B``: two result sets, or two git revisions measured here.

A side that names an existing CSV/directory is read as stored results. Any other side is
a git revision: it is checked out in a temporary ``git worktree`` and measured by running
``python -m harness bench --matrix M [--filter F] [--paths p,q] [--mode m,n] --out DIR``
inside it (``PYTHONPATH`` = the worktree), for ``rounds`` rounds, alternating the two
revisions (A B, B A, A B, ...) so drift of the GPU hits both alike. The rounds of a side
are pooled (samples concatenated), and their spread calibrates per-case noise margins.
A gating row those rounds leave undecided (SAME or AMBIGUOUS while its median moved
beyond the ``ab_screen`` setting, or any call within ``ab_undecided_se`` standard errors
of ``min_effect``) gets ``ab_extra_rounds`` more interleaved rounds of
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
subprocess above (``harness.engines.revisions``, shared with ``harness bisect``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..engines.compare import compare
from ..reports.markdown import text_table
from ..reports.render import write_reports
from ..results.environment import STRICT_ENV_HELP
from .common import add_settings_args, csv_list, plain, settings_from_args


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
