"""``harness baseline {accept,record,calibrate,lomo,show}``: promote runs, calibrate margins.

``accept`` promotes a run (printing the gate table against the previous baseline first,
then asking unless ``--yes``); ``record`` makes a new baseline from N A/A runs of one
commit (per case the medoid run's row). Both take ``--only-faster`` (only the rows the
gate reads FASTER against the previous baseline replace theirs) and ``--paths P1,P2``
(only rows of these paths are replaced), so a re-baseline cannot carry a slowdown in
(``baseline_rows``). ``calibrate`` replaces the noise margins of the
existing one from such runs (``harness.reports.calibration``); ``lomo`` checks those
margins leaving one machine out; ``show`` prints what a baseline directory holds. The
files themselves are ``harness.results.baseline``'s. Exit 0, or 1 when ``lomo`` finds a
false alarm or a missed planted slowdown; 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..engines.aa_baselines import calibrate, lomo_table, record
from ..engines.baseline_accept import accept
from ..engines.baseline_rows import RowFilter
from ..errors import HarnessError
from ..reports.calibration import (
    DEFAULT_COVERAGE,
    DEFAULT_PRIOR_DF,
)
from ..reports.stats import median
from ..results.baseline import (
    Baseline,
    BaselineNotFoundError,
    load_baseline,
)
from ..results.models import models_of
from ..results.store import load_run
from .common import add_settings_args, csv_list, plain, settings_from_args

ONLY_FASTER_HELP = ("per key, take the new row only where the gate reads it FASTER against the "
                    "previous baseline (a key the baseline lacks is added); every other key "
                    "keeps the previous baseline's row, so a slowdown is never baselined")
PATHS_HELP = ("comma-separated paths: only their rows are replaced (rows of other paths keep "
              "the previous baseline's)")
REFERENCE_HELP = ("write into baselines/<arch>/ itself, making this GPU model the arch's "
                  "reference, even where the baseline there is of another model (default: "
                  "a model other than the reference's goes to baselines/<arch>/models/<model>/)")
RUNS_HELP = ("A/A result directories of one commit, from separate processes on separate "
             "machines (at least 4 processes on 3 machines for a baseline that must hold on a "
             "new machine; docs/measurement.md)")
SAME_CODE_HELP = ("take runs of several commits whose measured code (harness/kernels, "
                  "measure, cases, model) has the same git trees; the baseline names the "
                  "newest of them, its sources every run's own commit")


def row_filter(only_faster: bool = False, paths: str | None = None) -> RowFilter:
    """The filter of ``--only-faster`` and ``--paths P1,P2`` (None: not given); an empty
    ``--paths`` is refused (one line)."""
    names = csv_list(paths)
    if paths is not None and not names:
        raise HarnessError("--paths: no path named (give e.g. --paths marlin_asym,fp16_cache)")
    return RowFilter(only_faster=only_faster, paths=tuple(dict.fromkeys(names)))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="accept, record, calibrate or show baselines",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    bsub = p.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    a = bsub.add_parser("accept",
                        help="print the diff against the current baseline, then promote RUN")
    a.add_argument("run", help="a result CSV or results directory")
    a.add_argument("--arch", default=None, help="baseline arch (default: the run's)")
    a.add_argument("--root", default="baselines", help="baselines root (default baselines)")
    a.add_argument("--yes", action="store_true",
                   help="promote without asking (for CI); "
                        "otherwise asks after printing the changes")
    a.add_argument("--only-faster", action="store_true", help=ONLY_FASTER_HELP)
    a.add_argument("--paths", default=None, metavar="P1,P2", help=PATHS_HELP)
    a.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    add_settings_args(a)
    a.set_defaults(func=run_accept)
    for name, helptext, func in (
        ("record",
         "a new baseline from N A/A runs: per case the medoid run's row, margins from all",
         run_record),
        ("calibrate", "replace the noise margins of the existing baseline from N A/A runs",
         run_calibrate),
        ("lomo", "leave-one-machine-out check of the margins that N A/A runs would give",
         run_lomo),
    ):
        c = bsub.add_parser(name, help=helptext, description=helptext)
        c.add_argument("--runs", nargs="+", required=True, metavar="RUN", help=RUNS_HELP)
        c.add_argument("--arch", default=None)
        c.add_argument("--root", default="baselines")
        c.add_argument("--coverage", type=float, default=DEFAULT_COVERAGE,
                       help="per-row probability that an unchanged build on a new machine stays "
                            f"inside its margin (default {DEFAULT_COVERAGE})")
        c.add_argument("--prior-df", type=float, default=DEFAULT_PRIOR_DF,
                       help="weight, in degrees of freedom, of the class's pooled spread against a "
                            f"row's own (default {DEFAULT_PRIOR_DF:g})")
        c.add_argument("--same-code", action="store_true", help=SAME_CODE_HELP)
        if name == "record":
            c.add_argument("--only-faster", action="store_true", help=ONLY_FASTER_HELP)
            c.add_argument("--paths", default=None, metavar="P1,P2", help=PATHS_HELP)
            c.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
        if name == "lomo":
            c.add_argument("--planted", type=float, default=0.05,
                           help="planted slowdown checked on each held-out run (default 0.05)")
            c.add_argument("--modes", default="graph",
                           help="modes whose speed gates (default graph)")
            c.add_argument("--ab-screen", action="store_true",
                           help="judge as `harness job` does with its A/B confirmation: "
                                "count the rows its ab_screen sends to A/B, and call a "
                                "planted row caught when it is screened")
        add_settings_args(c)
        c.set_defaults(func=func)
    s = bsub.add_parser("show", help="print a baseline's environment, rows and margins")
    s.add_argument("--arch", default=None, help="arch (default: every arch under --root)")
    s.add_argument("--root", default="baselines")
    s.set_defaults(func=run_show)


def run(args: argparse.Namespace) -> int:
    """``harness baseline ACTION``: the action's own ``run_*``."""
    return args.func(args)


def run_accept(args: argparse.Namespace) -> int:
    only = row_filter(args.only_faster, args.paths)
    accept(load_run(args.run), args.root, settings_from_args(args), arch=args.arch,
           confirm=None if args.yes else _ask_accept, only_faster=only.only_faster,
           paths=only.paths, reference=args.reference)
    return 0


def _ask_accept() -> bool:
    """Ask on a terminal; refuse (one line) where nobody can answer."""
    if not sys.stdin.isatty():
        raise HarnessError("not a terminal, so nobody can confirm the changes printed above; "
                           "run again with --yes to promote the run")
    return input("promote this run to the baseline? [y/N] ").strip().lower() in ("y", "yes")


def run_calibrate(args: argparse.Namespace) -> int:
    calibrate(args.runs, args.root, settings_from_args(args), arch=args.arch,
              coverage=args.coverage, prior_df=args.prior_df, same_code=_repo(args))
    return 0


def run_record(args: argparse.Namespace) -> int:
    only = row_filter(args.only_faster, args.paths)
    record(args.runs, args.root, settings_from_args(args), arch=args.arch,
           coverage=args.coverage, prior_df=args.prior_df, only_faster=only.only_faster,
           paths=only.paths, reference=args.reference, same_code=_repo(args))
    return 0


def _repo(args: argparse.Namespace) -> Path | None:
    """``--same-code``'s repository: this directory's (where the commits are resolved)."""
    return Path(".") if args.same_code else None


def run_lomo(args: argparse.Namespace) -> int:
    """Print the leave-one-machine-out table; exit 1 when a held-out run had a false alarm
    or a planted slowdown was caught in fewer than 95% of its rows."""
    settings = settings_from_args(args)
    lines, ok = lomo_table(args.runs, settings, coverage=args.coverage,
                           prior_df=args.prior_df, planted=args.planted, modes=csv_list(args.modes),
                           screen=settings.ab_screen if args.ab_screen else None,
                           same_code=_repo(args))
    print("\n".join(lines))
    return 0 if ok else 1


def run_show(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.arch:
        show(root / args.arch)
        return 0
    arches = (sorted(d for d in root.glob("*") if d.is_dir() and any(d.glob("*.csv")))
              if root.is_dir() else [])
    if not arches:
        raise BaselineNotFoundError(f"no baselines under {root}")
    for d in arches:
        show(d)
        for model in models_of(d).values():
            show(model)
    return 0


def show(directory: str | Path, echo: Callable[[str], None] = print) -> Baseline:
    """Print what a baseline directory holds."""
    base = load_baseline(directory)
    echo(f"{base.directory}: {base.environment.summary()}")
    for name, meta in base.metas.items():
        n = sum(1 for r in base.rows if r.matrix == name)
        margins = list(meta.noise_margins.values())
        cal = (f"{len(margins)} noise margins "
               f"(median {median(margins):.2%}, max {max(margins):.2%}), "
               f"calibrated {meta.calibration.get('date', '?')} "
               f"from {meta.calibration.get('runs', '?')} runs"
               if margins else "not calibrated (min_effect alone sets the speed threshold)")
        echo(f"  {name}: {n} rows, accepted {meta.accepted or '?'} "
             f"from {meta.source or '?'}; {cal}")
    return base
