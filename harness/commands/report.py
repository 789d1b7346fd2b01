"""``harness report RUN [--baseline DIR]``: CSV, HTML and Markdown reports of a stored run.

With ``--baseline`` the run is gated against the baseline of its arch (the environment
policy first: ``results.environment``), replaying the confirmation re-measurements its
bench stored, so the verdicts are the ones the bench printed; the command says whether
they agree with the verdicts stored in the run. Exit 0 when nothing regressed (always
without ``--baseline``), 1 on a failing verdict, 2 on bad input or a refused comparison.
A matrix whose baseline refuses the comparison (another measured setting, say) is left out
and named (exit 2) while the run's other matrices are gated, as the bench gates each
matrix on its own. Torch-free: reports render on any machine. ``gate_stored`` is the
gating step, shared with ``harness merge`` (several runs in one report).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from ..errors import EXIT_ERROR, one_line, worst_exit
from ..reports.ab_confirm import apply_ab, record_for
from ..reports.devices import device_spread_lines
from ..reports.gate import evaluate, stored_remeasure
from ..reports.gate_record import agreement, stored_partial
from ..reports.markdown import text_table
from ..reports.render import write_reports
from ..reports.verdicts import GateResult
from ..results.baseline import check_baseline_gate, run_settings
from ..results.environment import (
    STRICT_ENV_HELP,
    Environment,
    IncompatibleBaselineError,
    warning_lines,
    with_env_warnings,
)
from ..results.models import has_matrix, load_for_model
from ..results.store import Run, load_run
from .common import add_settings_args, plain, stored_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report",
                       help="render CSV/HTML/Markdown reports of a stored run, optionally gated",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a result CSV, its json, or a results directory "
                               "(results/<commit>/<arch>)")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="gate against this baseline (baselines/ or baselines/<arch>)")
    p.add_argument("--arch", default=None, help="arch of the baseline to use (default: the run's)")
    p.add_argument("--out", default=None, help="output directory (default: <run dir>/report)")
    p.add_argument("--partial", action="store_true",
                   help="ignore baseline cases absent from the run (a filtered run) "
                        "instead of MISSING")
    p.add_argument("--strict-env", action="store_true", help=STRICT_ENV_HELP)
    add_settings_args(p)
    p.set_defaults(func=run)


@dataclass(frozen=True)
class StoredGate:
    """A stored run gated the way ``harness report`` gates it."""

    result: GateResult
    baseline_env: Environment | None
    #: matrices of the run with no baseline (only with ``missing_ok``): their rows are NEW
    no_baseline: tuple[str, ...] = ()
    #: matrix -> why its baseline refuses the comparison (another measured setting, ...):
    #: those rows are left out; the other matrices are gated, as the bench gates each one
    refused: tuple[tuple[str, str], ...] = ()


def gate_stored(stored: Run, settings: Settings, *, baseline: str | None, arch: str | None = None,
                partial: bool | str = False, strict_env: bool = False, missing_ok: bool = False,
                command: str = "harness report") -> StoredGate:
    """Gate a stored run against ``<baseline>/<arch>/`` (the run's arch by default), the
    environment policy first, replaying the confirmation rows its bench stored; without
    ``baseline`` every row is NEW. Environment warnings go to stderr (prefixed with
    ``command``) and lead the result's notes. A matrix without a baseline raises
    ``BaselineNotFoundError``, or with ``missing_ok`` is gated against nothing (NEW rows)
    and named in ``StoredGate.no_baseline``."""
    base_rows, margins, base_env, base_label, env_warnings = [], {}, None, "baseline", []
    base_commits: dict[str, str] = {}      # matrix -> the commit its baseline json names
    timing_reason = None
    absent: list[str] = []
    refused: list[tuple[str, str]] = []
    if baseline:
        arch = arch or stored.environment.arch
        if not arch:
            raise ValueError(f"{stored.source}: the run does not record its arch; pass --arch")
        model = _run_model(stored)
        matrices = stored.matrices
        if missing_ok:
            absent = [m for m in matrices if not has_matrix(baseline, arch, model(m), m)]
            matrices = [m for m in matrices if m not in absent]
        refused, env_warnings, timing_reason = _check_matrices(stored, baseline, arch, matrices,
                                                                strict_env)
        if refused and len(refused) == len(matrices):
            more = "; ".join(f"{m}: {why.split(': ', 1)[-1]}" for m, why in refused[1:])
            raise IncompatibleBaselineError(
                refused[0][1] + (f" ({refused[0][0]}; also {more})" if more else ""))
        matrices = [m for m in matrices if m not in dict(refused)]
        if matrices:
            base = load_for_model(baseline, arch, model, matrices)
            for line in warning_lines(command, env_warnings):
                print(line, file=sys.stderr)
            base_rows, margins = list(base.rows), base.margins
            base_env, base_label = base.environment, base.label
            base_commits = {m: meta.environment.commit for m, meta in base.metas.items()}
    skip = {m for m, _ in refused}
    rows = [r for r in stored.rows if r.matrix not in skip]
    # the bench's confirmation re-measurements, stored with the run, are replayed: the
    # same rows, baseline and settings give the verdicts the bench printed
    # a run its bench gated as partial (--mode/--paths/--filter) is read the same way
    result = evaluate(rows, base_rows, settings, margins=margins,
                      partial=partial or stored_partial(stored.metas),
                      remeasure=stored_remeasure(stored.confirmations),
                      current_label=stored.label, baseline_label=base_label,
                      timing_reason=timing_reason)
    if baseline and base_env is not None:   # the job's same-machine A/B readings, per matrix
        # each against its own matrix's baseline commit: after `baseline accept
        # --only-faster` production's json may name another commit than ppl's
        for matrix, meta in stored.metas.items():
            if matrix not in skip:
                result = apply_ab(result, record_for(meta, base_commits.get(matrix,
                                                                          base_env.commit)))
    return StoredGate(with_env_warnings(result, env_warnings), base_env, tuple(absent),
                      tuple(refused))


def _run_model(stored: Run):
    """matrix -> the GPU model that measured it (its own json's, else the run's)."""
    def model(m: str) -> str:
        meta = stored.metas.get(m)
        return (meta.environment if meta is not None else stored.environment).gpu_name
    return model


def _check_matrices(stored: Run, root, arch: str, matrices,
                    strict_env: bool) -> tuple[list, list[str], str | None]:
    """The environment policy per matrix, each against its own recorded environment (one
    directory may hold the job's matrices beside a separate process's parity run) and the
    baseline of its GPU model: (matrix, one-line reason) of each refused matrix, the
    others' warnings (once each) and their first timing reason (another GPU model)."""
    refused, warnings, timing = [], [], None
    for m in matrices:
        env = stored.metas[m].environment if m in stored.metas else stored.environment
        try:
            check = check_baseline_gate(load_for_model(root, arch, env.gpu_name, [m]), env,
                                        lambda name: run_settings(stored, name),
                                        strict=strict_env)
        except IncompatibleBaselineError as exc:
            refused.append((m, one_line(exc)))
            continue
        warnings += [w for w in check.warnings if w not in warnings]
        timing = timing or check.timing_reason
    return refused, warnings, timing


def run(args: argparse.Namespace) -> int:
    stored = load_run(args.run)
    settings = stored_settings(args, stored)
    if not stored.rows:
        raise ValueError(f"{args.run}: the run has no rows")
    gated = gate_stored(stored, settings, baseline=args.baseline, arch=args.arch,
                        partial=args.partial, strict_env=args.strict_env)
    result = gated.result
    src = Path(args.run)
    out = Path(args.out) if args.out else (src if src.is_dir() else src.parent) / "report"
    files = write_reports(result, out, "report", rows=list(stored.rows),
                          current_env=stored.environment, baseline_env=gated.baseline_env)
    print(text_table(result, changes_only=True))
    same = agreement(result, stored.metas) if args.baseline else None
    if same:
        print(f"harness report: {same}")
    if args.baseline:               # a run spread over several GPUs: one slower than the rest?
        for matrix in stored.matrices:
            for line in device_spread_lines(list(stored.rows), args.baseline,
                                            args.arch or stored.environment.arch, matrix,
                                            settings.min_effect, command="harness report"):
                print(line)
    print(f"wrote {files.csv}, {files.html}, {files.markdown}")
    for matrix, why in gated.refused:
        print(f"harness report: not gated: {matrix}: {why}", file=sys.stderr)
    if not args.baseline:
        return 0
    return worst_exit([result.exit_code, EXIT_ERROR]) if gated.refused else result.exit_code
