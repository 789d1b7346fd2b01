"""``harness report``, ``harness compare`` and ``harness baseline {accept,calibrate,show}``.

Exit status of ``report`` (with ``--baseline``) and ``compare``: 0 when nothing regressed,
1 on a failing verdict; 2 on bad input or a refused comparison (raised as one-line
errors and printed by ``harness.cli.main``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ..config import load_settings, parse_overrides
from .calibration import DEFAULT_COVERAGE, DEFAULT_PRIOR_DF
from .environment import STRICT_ENV_HELP


def _settings(args: argparse.Namespace):
    return load_settings(args.preset, parse_overrides(args.set))


def _run_settings(args: argparse.Namespace, run):
    """The settings a stored run was gated with (its json), unless --preset/--set say
    otherwise: reading a run again gives the bench's verdicts by default."""
    from ..config import ConfigError, Settings

    if args.preset is None and not args.set:
        stored = [m.settings for m in run.metas.values() if m.settings]
        if stored:
            try:
                return Settings.from_dict(stored[0], f"{run.source} (settings)")
            except ConfigError:
                pass                    # an older run's settings: the current defaults
    return _settings(args)


def _add_settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=None, help="settings preset from [tool.harness] (default, strict, permissive)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="override one setting, e.g. --set min_effect=0.05 (repeatable)")


def _csv_list(text: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def _locked(func):
    """Turn a held results/baseline lock into the console script's one-line error."""
    def wrapper(args: argparse.Namespace) -> int:
        from ..cli import HarnessError
        from .writer import StoreLockedError

        try:
            return func(args)
        except StoreLockedError as exc:
            raise HarnessError(str(exc)) from None
    return wrapper


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render CSV/HTML/Markdown reports of a stored run, optionally gated")
    p.add_argument("run", help="a result CSV, its json, or a results directory (results/<commit>/<arch>)")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="gate against this baseline (baselines/ or baselines/<arch>)")
    p.add_argument("--arch", default=None, help="arch of the baseline to use (default: the run's)")
    p.add_argument("--out", default=None, help="output directory (default: <run dir>/report)")
    p.add_argument("--partial", action="store_true",
                   help="ignore baseline cases absent from the run (a filtered run) instead of MISSING")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    _add_settings_args(p)
    p.set_defaults(func=_locked(run_report))

    p = sub.add_parser("compare", help="compare two result sets or two git revisions (B against A)")
    p.add_argument("a", help="baseline side: result CSV/directory or git revision")
    p.add_argument("b", help="current side: result CSV/directory or git revision")
    p.add_argument("--out", default=None, help="output directory (default: results/compare/<A>_vs_<B>)")
    p.add_argument("--matrix", default="production", help="matrix to measure for revisions (default production)")
    p.add_argument("--filter", default=None, help="case filter passed to harness bench")
    p.add_argument("--paths", default=None, help="comma-separated paths passed to harness bench")
    p.add_argument("--mode", default=None, help="comma-separated timing modes passed to harness bench")
    p.add_argument("--rounds", type=int, default=3, help="interleaved runs per revision (default 3)")
    p.add_argument("--repo", default=".", help="git repository holding the revisions (default .)")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    _add_settings_args(p)
    p.set_defaults(func=_locked(run_compare))

    p = sub.add_parser("baseline", help="accept, calibrate or show baselines")
    bsub = p.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    a = bsub.add_parser("accept", help="print the diff against the current baseline, then promote RUN")
    a.add_argument("run", help="a result CSV or results directory")
    a.add_argument("--arch", default=None, help="baseline arch (default: the run's)")
    a.add_argument("--root", default="baselines", help="baselines root (default baselines)")
    a.add_argument("--yes", action="store_true",
                   help="promote without asking (for CI); otherwise asks after printing the changes")
    _add_settings_args(a)
    a.set_defaults(func=_locked(run_accept))
    runs_help = ("A/A result directories of one commit, from separate processes on separate "
                 "machines (at least 4 processes on 3 machines for a baseline that must hold on a "
                 "new machine; docs/measurement.md)")
    for name, helptext, func in (
        ("record", "a new baseline from N A/A runs: per case the medoid run's row, margins from all",
         run_record),
        ("calibrate", "replace the noise margins of the existing baseline from N A/A runs",
         run_calibrate),
        ("lomo", "leave-one-machine-out check of the margins that N A/A runs would give",
         run_lomo),
    ):
        c = bsub.add_parser(name, help=helptext, description=helptext)
        c.add_argument("--runs", nargs="+", required=True, metavar="RUN", help=runs_help)
        c.add_argument("--arch", default=None)
        c.add_argument("--root", default="baselines")
        c.add_argument("--coverage", type=float, default=DEFAULT_COVERAGE,
                       help="per-row probability that an unchanged build on a new machine stays "
                            f"inside its margin (default {DEFAULT_COVERAGE})")
        c.add_argument("--prior-df", type=float, default=DEFAULT_PRIOR_DF,
                       help="weight, in degrees of freedom, of the class's pooled spread against a "
                            f"row's own (default {DEFAULT_PRIOR_DF:g})")
        if name == "lomo":
            c.add_argument("--planted", type=float, default=0.05,
                           help="planted slowdown checked on each held-out run (default 0.05)")
            c.add_argument("--modes", default="graph", help="modes whose speed gates (default graph)")
        _add_settings_args(c)
        c.set_defaults(func=_locked(func))
    s = bsub.add_parser("show", help="print a baseline's environment, rows and margins")
    s.add_argument("--arch", default=None, help="arch (default: every arch under --root)")
    s.add_argument("--root", default="baselines")
    s.set_defaults(func=run_show)


def run_report(args: argparse.Namespace) -> int:
    from .baseline import baseline_dir, check_baseline, load_baseline, run_settings
    from .environment import warning_lines, with_env_warnings
    from .gate import evaluate, stored_remeasure
    from .gate_record import agreement
    from .markdown import text_table
    from .render import write_reports
    from .store import load_run

    run = load_run(args.run)
    settings = _run_settings(args, run)
    if not run.rows:
        raise ValueError(f"{args.run}: the run has no rows")
    base_rows, margins, base_env, base_label, env_warnings = [], {}, None, "baseline", []
    if args.baseline:
        arch = args.arch or run.environment.arch
        if not arch:
            raise ValueError(f"{args.run}: the run does not record its arch; pass --arch")
        base = load_baseline(baseline_dir(args.baseline, arch), run.matrices)
        env_warnings = check_baseline(base, run.environment, lambda m: run_settings(run, m),
                                      strict=args.strict_env)
        for line in warning_lines("harness report", env_warnings):
            print(line, file=sys.stderr)
        base_rows, margins, base_env, base_label = list(base.rows), base.margins, base.environment, base.label
    # the bench's confirmation re-measurements, stored with the run, are replayed: the
    # same rows, baseline and settings give the verdicts the bench printed
    result = evaluate(list(run.rows), base_rows, settings, margins=margins, partial=args.partial,
                      remeasure=stored_remeasure(run.confirmations),
                      current_label=run.label, baseline_label=base_label)
    result = with_env_warnings(result, env_warnings)
    src = Path(args.run)
    out = Path(args.out) if args.out else (src if src.is_dir() else src.parent) / "report"
    files = write_reports(result, out, "report", rows=list(run.rows), current_env=run.environment,
                          baseline_env=base_env)
    print(text_table(result, changes_only=True))
    same = agreement(result, run.metas) if args.baseline else None
    if same:
        print(f"harness report: {same}")
    print(f"wrote {files.csv}, {files.html}, {files.markdown}")
    return result.exit_code if args.baseline else 0


def _slug(text: str) -> str:
    """A directory-name version of a compare side (last two path parts, 12 chars each)."""
    parts = [p[:12] for p in Path(text).parts[-2:] if p not in ("/", ".", "..")] or ["x"]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))


def run_compare(args: argparse.Namespace) -> int:
    from .compare import compare
    from .markdown import text_table
    from .render import write_reports

    settings = _settings(args)
    out = Path(args.out) if args.out else Path("results") / "compare" / f"{_slug(args.a)}_vs_{_slug(args.b)}"
    outcome = compare(args.a, args.b, settings, work_dir=out, repo=Path(args.repo), matrix=args.matrix,
                      filter=args.filter, paths=_csv_list(args.paths), modes=_csv_list(args.mode),
                      rounds=args.rounds, strict_env=args.strict_env)
    files = write_reports(outcome.result, out, "compare", title=f"compare {outcome.a.label} -> {outcome.b.label}",
                          rows=list(outcome.b_rows), labels=("A", "B"),
                          current_env=outcome.b.run.environment if outcome.b.run else None,
                          baseline_env=outcome.a.run.environment if outcome.a.run else None)
    print(text_table(outcome.result, changes_only=True))
    print(f"wrote {files.csv}, {files.html}, {files.markdown}")
    return outcome.result.exit_code


def run_accept(args: argparse.Namespace) -> int:
    from .baseline import accept
    from .store import load_run

    accept(load_run(args.run), args.root, _settings(args), arch=args.arch,
           confirm=None if args.yes else _ask_accept)
    return 0


def _ask_accept() -> bool:
    """Ask on a terminal; refuse (one line) where nobody can answer."""
    from ..cli import HarnessError

    if not sys.stdin.isatty():
        raise HarnessError("not a terminal, so nobody can confirm the changes printed above; "
                           "run again with --yes to promote the run")
    return input("promote this run to the baseline? [y/N] ").strip().lower() in ("y", "yes")


def run_calibrate(args: argparse.Namespace) -> int:
    from .baseline import calibrate

    calibrate(args.runs, args.root, _settings(args), arch=args.arch, coverage=args.coverage,
              prior_df=args.prior_df)
    return 0


def run_record(args: argparse.Namespace) -> int:
    from .baseline import record

    record(args.runs, args.root, _settings(args), arch=args.arch, coverage=args.coverage,
           prior_df=args.prior_df)
    return 0


def run_lomo(args: argparse.Namespace) -> int:
    """Print the leave-one-machine-out table; exit 1 when a held-out run had a false alarm
    or a planted slowdown was caught in fewer than 95% of its rows."""
    from .baseline import lomo_table

    lines, ok = lomo_table(args.runs, _settings(args), coverage=args.coverage,
                           prior_df=args.prior_df, planted=args.planted, modes=_csv_list(args.modes))
    print("\n".join(lines))
    return 0 if ok else 1


def run_show(args: argparse.Namespace) -> int:
    from .baseline import BaselineNotFoundError, show

    root = Path(args.root)
    if args.arch:
        show(root / args.arch)
        return 0
    arches = sorted(d for d in root.glob("*") if d.is_dir() and any(d.glob("*.csv"))) if root.is_dir() else []
    if not arches:
        raise BaselineNotFoundError(f"no baselines under {root}")
    for d in arches:
        show(d)
    return 0
