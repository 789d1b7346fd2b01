"""``harness history``: an arch's stored runs over the commit line, with their steps.

Reads every run of the arch under ``--results`` (``<commit>/<arch>/`` and
``<commit>/<arch>.rep<k>/``), orders them by the first-parent line of ``--rev`` (``git
log --first-parent``: the newest ``--last`` commits, the older ones without any run left
out), and writes one self-contained HTML page and a CSV of the steps to ``--out``
(default ``<results>/history/<arch>/``): per matrix, path and mode the time and accuracy
over the commits inside the noise band of the baselines (``<baselines>/<arch>/<matrix>.json``
noise margins, never below noise_margin_floor), steps marked (ruptures PELT per row, kept
beyond the gate's threshold, judged by the gate's speed call), gaps with their reasons.
Prints the steps. Exit 0 (a report), 2 on bad input (no git, no stored run, several
arches without --arch).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..engines.revisions import first_parent, resolve_revision
from ..errors import HarnessError
from ..reports.history import RowKey, build_history, one_model
from ..reports.history_html import write_history
from ..reports.steps import detect_steps
from ..results.baseline import BaselineNotFoundError, read_baseline_matrix
from ..results.catalog import archs, stored_runs
from ..results.models import matrix_dir
from ..results.schema import SchemaError
from .common import add_settings_args, csv_list, plain, settings_from_args


class HistoryError(HarnessError, ValueError):
    """A history that cannot be drawn (no stored run, an arch to choose...)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="stored runs over the commit line: time, accuracy, steps",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results", help="results root (default results/)")
    p.add_argument("--arch", default=None,
                   help="arch of the runs (default: the only one under --results)")
    p.add_argument("--rev", default="HEAD", help="the line ends here (default HEAD)")
    p.add_argument("--last", type=int, default=100,
                   help="newest commits of the line to consider (default 100)")
    p.add_argument("--repo", default=".", help="git repository (default .)")
    p.add_argument("--baselines", default="baselines",
                   help="baselines root: noise margins per row (default baselines/)")
    p.add_argument("--matrix", default=None, help="comma list of matrices (default: all)")
    p.add_argument("--paths", default=None, help="comma list of paths (default: all)")
    p.add_argument("--mode", default=None, help="comma list of modes (default: all)")
    p.add_argument("--model", default=None, metavar="GPU",
                   help="the GPU model whose runs are drawn (a name or its folder slug, e.g. "
                        "nvidia-h100-80gb-hbm3; default: the model with the most runs); the "
                        "page never draws two models on one time axis")
    p.add_argument("--out", default=None,
                   help="output directory (default <results>/history/<arch>)")
    add_settings_args(p)
    p.set_defaults(func=run)


def pick_arch(results: Path, arch: str | None) -> str:
    """``arch``, or the only arch with stored runs under ``results``."""
    if arch:
        return arch
    found = archs(results)
    if not found:
        raise HistoryError(f"{results}: no stored run (<commit>/<arch>/<matrix>.csv)")
    if len(found) > 1:
        raise HistoryError(f"{results} holds runs of {', '.join(found)}: pass --arch")
    return found[0]


def baseline_margins(baselines: Path, arch: str, model: str,
                     matrices: list[str]) -> tuple[dict, list[str]]:
    """Per row the noise margin of the baseline of ``model`` (``results.models``: its own
    folder, else the arch's); notes on what is missing."""
    margins: dict[RowKey, float] = {}
    notes = []
    for matrix in matrices:
        try:
            _, meta = read_baseline_matrix(matrix_dir(baselines, arch, model, matrix), matrix)
        except (BaselineNotFoundError, SchemaError) as exc:
            notes.append(f"matrix {matrix}: no baseline noise margins ({exc}); the band is "
                         "noise_margin_floor")
            continue
        if not meta.noise_margins:
            notes.append(f"matrix {matrix}: the baseline carries no noise margins; the band "
                         "is noise_margin_floor")
        margins.update({(matrix, *k): v for k, v in meta.noise_margins.items()})
    return margins, notes


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    results, repo = Path(args.results), Path(args.repo)
    arch = pick_arch(results, args.arch)
    runs = stored_runs(results, arch)
    if not runs:
        raise HistoryError(f"{results}: no stored run of {arch}")
    model, runs, others = one_model(runs, args.model)
    if args.last < 1:
        raise HistoryError(f"--last must be >= 1, got {args.last}")
    tip = resolve_revision(repo, args.rev)
    line = [(c.sha, c.subject) for c in first_parent(repo, tip, last=args.last)]
    matrices = sorted({m for r in runs if r.run is not None for m in r.run.matrices})
    wanted = list(csv_list(args.matrix))
    margins, notes = baseline_margins(Path(args.baselines), arch, model, wanted or matrices)
    if others:
        notes.insert(0, f"GPU model {model!r} drawn; runs of other models of {arch} are not "
                        "(their times do not share one axis): "
                        + ", ".join(f"{m} ({n} run(s))" for m, n in others.items())
                        + "; --model NAME draws one of them")
    history = build_history(line, runs, arch=arch, margins=margins,
                            floor=settings.noise_margin_floor, matrices=wanted,
                            paths=csv_list(args.paths), modes=csv_list(args.mode))
    steps = detect_steps(history, settings)
    out = Path(args.out) if args.out else results / "history" / arch
    files = write_history(history, steps, settings, out, notes=notes,
                          title=f"Results history: {arch}" + (f" on {model}" if model else ""))
    slots = {s.index: s for s in history.slots}
    print(f"harness history: {arch} on {model or 'an unknown GPU model'}, "
          f"{len(history.slots)} commits ({history.runs} stored runs, "
          f"{len(history.off_line)} off the line), {len(history.series)} rows, "
          f"{len(steps)} steps")
    for note in notes:
        print(f"harness history: {note}")
    for st in steps:
        print(f"  {slots[st.index].short} #{st.index:<3} {st.kind:8} {st.verdict!s:14} "
              f"{st.size:+7.2%}  {st.matrix} {st.path} {st.mode}: {len(st.rows)} of {st.of} rows"
              f"  {slots[st.index].subject[:50]}")
    print(f"wrote {files.html}, {files.steps_csv}")
    return 0
