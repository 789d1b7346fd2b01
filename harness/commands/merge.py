"""``harness merge RUN [RUN ...] --out DIR [--baseline DIR]``: the runs of several machines
and arches in one report.

Each RUN is a stored run (``results/<commit>/<arch>``) or a folder holding several (e.g.
the artifacts a CI workflow downloaded from its arch jobs: every folder under it with a
``<matrix>.csv`` beside its ``<matrix>.json`` is a run). Runs are never merged: two runs
of one arch from two machines are shown apart, labelled by machine.

Verdicts per run: with ``--baseline`` each run is gated as ``harness report`` gates it
(``report.gate_stored``: the environment policy, the baseline of the run's arch, the
bench's stored confirmation rows replayed); a matrix with no baseline there gives NEW rows
and exit 3, and a comparison the policy refuses gives that run exit 2 with the reason (the
other runs are still reported). Without ``--baseline`` the verdicts and exit codes are the
ones each bench stored with its run (the gate record; a run without one: exit 3, nothing
judged).

Writes ``DIR/merged.csv`` (every row, with run, arch and machine columns), a
self-contained ``DIR/index.html`` and ``DIR/summary.md``; exits with the worst run's code
(``errors.worst_exit``: 2 over 1 over 4 over 3 over 0). A run that cannot be read stops
the merge with one line naming its file (exit 2). Torch-free.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config import Settings
from ..errors import EXIT_ERROR, EXIT_NO_BASELINE, EXIT_PASS, EXPECTED_ERRORS, one_line
from ..reports.fleet import FleetRun, fleet_exit, label_runs, machine_of
from ..reports.fleet_render import exit_line, write_fleet
from ..reports.gate import evaluate
from ..reports.gate_record import agreement, stored_result, stored_verdicts
from ..results.environment import STRICT_ENV_HELP
from ..results.schema import SchemaError
from ..results.store import Run, load_run
from . import report
from .common import add_settings_args, plain, stored_settings

#: Folders under a run that hold derived files, not runs (``ab``: the job's A/B and
#: machine-factor benches, parts of the run's verdicts, not runs of the fleet).
_SKIP = {"report", "candidate-baseline", "confirm", "ab"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="one report of runs from several machines and arches",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="a results directory (results/<commit>/<arch>) or a folder holding "
                        "several (e.g. downloaded CI artifacts)")
    p.add_argument("--out", required=True, help="output directory (merged.csv, index.html, "
                                                "summary.md)")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="gate each run against DIR/<its arch> (e.g. baselines); default: the "
                        "verdicts each bench stored with its run")
    p.add_argument("--partial", action="store_true",
                   help="ignore baseline cases absent from a run (a filtered run) "
                        "instead of MISSING")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    add_settings_args(p)
    p.set_defaults(func=run)


def find_runs(path: str | Path) -> list[Path]:
    """The run directories ``path`` names: itself when it is a file or holds no run
    below it (``load_run`` then says what is wrong), else every folder under it with a
    ``<matrix>.csv`` beside a ``<matrix>.json`` (report, confirm, candidate-baseline and
    ab folders left out)."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    found = sorted({j.parent for j in path.rglob("*.json")
                    if j.with_suffix(".csv").is_file()
                    and not set(j.relative_to(path).parts[:-1]) & _SKIP})
    return found or [path]


def _read(paths: list[Path]) -> list[Run]:
    runs, seen = [], set()
    for path in paths:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        stored = load_run(path)
        if not stored.rows:
            raise SchemaError(f"{path}: the run has no rows")
        runs.append(stored)
    return runs


def _failing(result) -> str:
    counts: dict[str, int] = {}
    for v in result.failures:
        counts[str(v.verdict)] = counts.get(str(v.verdict), 0) + 1
    return "failing verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _judge(stored: Run, settings: Settings, args: argparse.Namespace) -> dict:
    """The FleetRun fields that say how ``stored`` was judged."""
    if not args.baseline:
        if not stored_verdicts(stored.metas):
            result = evaluate(list(stored.rows), [], settings, current_label=stored.label)
            return dict(result=result, exit_code=EXIT_NO_BASELINE, verdicts_from="nothing",
                        reason="no stored gate record (measured with --no-compare?): not judged")
        result, code = stored_result(stored, settings)
        reason = ("passed" if code == EXIT_PASS else _failing(result) if result.failures
                  else "a matrix has no baseline or no gate record: rows NEW"
                  if code == EXIT_NO_BASELINE else "the stored gate record failed")
        return dict(result=result, exit_code=code, reason=reason,
                    verdicts_from=f"stored gate record ({result.baseline_label})")
    try:
        gated = report.gate_stored(stored, settings, baseline=args.baseline,
                                   partial=args.partial, strict_env=args.strict_env,
                                   missing_ok=True, command="harness merge")
    except EXPECTED_ERRORS as exc:        # a refused comparison or a broken baseline
        result = evaluate(list(stored.rows), [], settings, current_label=stored.label)
        return dict(result=result, exit_code=EXIT_ERROR, verdicts_from="not gated",
                    reason=f"not gated: {one_line(exc)}")
    result = gated.result
    where = f"{args.baseline}/{stored.environment.arch}"
    if gated.refused:          # a matrix the baseline refuses: that run is in error
        code = EXIT_ERROR
        reason = "not gated: " + "; ".join(f"{m}: {why}" for m, why in gated.refused)
        if result.failures:
            reason = f"{_failing(result)}; {reason}"
    elif result.failures:
        code, reason = result.exit_code, _failing(result)
    elif gated.no_baseline:
        code = EXIT_NO_BASELINE
        reason = f"no baseline for {', '.join(gated.no_baseline)} in {where}: rows NEW"
    else:
        code, reason = EXIT_PASS, "passed"
    same = agreement(result, stored.metas)
    return dict(result=result, exit_code=code, reason=reason, notes=(same,) if same else (),
                verdicts_from=(f"{where} ({result.baseline_label})" if result.has_baseline
                               else f"{where} (none)"))


def run(args: argparse.Namespace) -> int:
    stored_runs = _read([d for p in args.runs for d in find_runs(p)])
    labels = label_runs([s.environment for s in stored_runs])
    fleet = []
    for stored, label in zip(stored_runs, labels, strict=True):
        env = stored.environment
        fleet.append(FleetRun(label=label, arch=env.arch or "unknown", machine=machine_of(env),
                              environment=env, source=stored.source, rows=stored.rows,
                              **_judge(stored, stored_settings(args, stored), args)))
    files = write_fleet(fleet, args.out)
    table = Table(title=f"harness merge: {len(fleet)} runs", title_justify="left")
    for col in ("run", "rows", "verdicts from", "exit", "reason"):
        table.add_column(col, justify="right" if col in ("rows", "exit") else "left")
    for r in sorted(fleet, key=lambda r: (r.arch, r.label)):
        table.add_row(r.label, str(len(r.rows)), r.verdicts_from, str(r.exit_code), r.reason)
    Console(width=160, file=sys.stdout).print(table)
    for r in fleet:
        for note in r.notes:
            print(f"harness merge: {r.label}: {note}")
    print(f"harness merge: {exit_line(fleet)}")
    print(f"wrote {files.csv}, {files.html}, {files.markdown}")
    return fleet_exit(fleet)
