"""What several commands share: the settings arguments and the gate step of a fresh run.

``add_settings_args`` / ``settings_from_args``: ``--preset`` and ``--set KEY=VALUE``.
``gate_against_baseline``: the step ``harness bench`` and ``harness ppl`` end with, one
matrix of a run just written gated against ``<baselines>/<arch>/<matrix>.csv`` (or, with
no baseline there, a candidate baseline written beside the run), the verdicts kept with
the run (``reports.gate_record``). Torch-free.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..config import ConfigError, Settings, load_settings, parse_overrides
from ..errors import EXIT_NO_BASELINE
from ..reports.gate import evaluate
from ..reports.gate_record import write_gate_record
from ..reports.markdown import text_table
from ..reports.verdicts import Remeasure
from ..results.baseline import (
    BaselineMeta,
    check_baseline_gate,
    load_baseline,
    write_baseline_matrix,
)
from ..results.environment import Environment, warning_lines, with_env_warnings
from ..results.models import has_matrix, load_for_model, matrix_dir, model_dir
from ..results.schema import ResultRow, SchemaError
from ..results.store import Run


def add_settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=None,
                   help="settings preset from [tool.harness] (default, strict, permissive)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="override one setting, e.g. --set min_effect=0.05 (repeatable)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    return load_settings(args.preset, parse_overrides(args.set))


def stored_settings(args: argparse.Namespace, run: Run) -> Settings:
    """The settings a stored run was gated with (its json), unless --preset/--set say
    otherwise: reading a run again gives the bench's verdicts by default."""
    if args.preset is None and not args.set:
        stored = [m.settings for m in run.metas.values() if m.settings]
        if stored:
            try:
                return Settings.from_dict(stored[0], f"{run.source} (settings)")
            except ConfigError:
                pass                    # an older run's settings: the current defaults
    return settings_from_args(args)


def csv_list(text: str | None) -> tuple[str, ...]:
    """``"a, b,,c"`` -> ``("a", "b", "c")``."""
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def gate_against_baseline(
    rows: Sequence[ResultRow], matrix: str, *, command: str, run_dir: Path, baselines: str | Path,
    arch: str, env: Environment, settings: Settings, measured: Mapping, strict_env: bool = False,
    partial: bool | str = False, remeasure: Remeasure | None = None, current_label: str = "current",
    echo: Callable[[str], None] = print,
) -> int:
    """Gate ``rows`` (``matrix`` of the run in ``run_dir``) against the baseline of ``arch``
    under ``baselines``; returns the gate's exit code.

    ``measured``: the run's settings as ``check_baseline_gate`` compares them (a refused
    baseline raises ``IncompatibleBaselineError``; warnings are echoed, prefixed with
    ``command``, and lead the result's notes; a baseline from another GPU model of the
    arch is judged on accuracy, its timing rows TIMING_NOT_COMPARABLE). With no baseline
    a CANDIDATE baseline is written under ``<run_dir>/candidate-baseline/`` (never into
    ``baselines``), and ERROR and WORSE_ACCURACY rows still fail.
    """
    bdir = matrix_dir(baselines, arch, env.gpu_name, matrix)
    record = run_dir / f"{matrix}.csv"
    if not (bdir / f"{matrix}.csv").is_file():
        meta = BaselineMeta(matrix=matrix, arch=arch, environment=env, rows_sha256="",
                            settings=settings.to_dict(), source=str(record))
        path = write_baseline_matrix(run_dir / "candidate-baseline", rows, meta)
        echo(f"{command}: no baseline for {arch} {matrix} ({bdir / (matrix + '.csv')}): "
             f"{len(rows)} rows NEW; wrote a CANDIDATE baseline {path}; to accept it after "
             f"review: harness baseline accept {run_dir} --root {baselines} --yes")
        alone = evaluate(rows, [], settings, current_label=current_label)
        write_gate_record(record, alone)
        for v in alone.failures:
            echo(f"{command}: {v.verdict} {v.case_id} {v.path} {v.mode}: {v.reason}")
        # ERROR and WORSE_ACCURACY rows still fail; otherwise "nothing to compare", which CI
        # must be able to tell from a pass
        return alone.exit_code if alone.exit_code else EXIT_NO_BASELINE
    base = load_baseline(bdir, [matrix])
    env_check = check_baseline_gate(base, env, measured, strict=strict_env)
    for line in warning_lines(command, env_check.warnings):
        echo(line)
    result = evaluate(rows, base.rows, settings, margins=base.margins, remeasure=remeasure,
                      partial=partial, current_label=current_label, baseline_label=base.label,
                      timing_reason=env_check.timing_reason)
    result = with_env_warnings(result, env_check.warnings)
    write_gate_record(record, result, partial=partial)
    echo(text_table(result))
    if env_check.timing_reason:
        echo(first_run_on_model(command, run_dir, baselines, arch, env.gpu_name,
                                base.environment.gpu_name))
    counts = {str(k): n for k, n in result.counts().items() if n}
    echo(f"{command}: gate {matrix} vs {bdir}: {counts}; exit {result.exit_code}")
    return result.exit_code


def refuse_early(matrices: Sequence[str], *, baselines: str | Path, arch: str,
                 env: Environment, measured: Mapping, strict_env: bool = False) -> None:
    """Apply the environment policy to each matrix's baseline before anything is measured:
    a setting, arch or switch the gate would refuse afterwards (``--preset strict`` against
    the default-preset baselines, say) raises ``IncompatibleBaselineError`` now, one line,
    exit 2, instead of after the whole run. Matrices without a baseline pass, and so does
    one whose files cannot be read (the gate names it after measuring: the rows are kept)."""
    for matrix in matrices:
        if not has_matrix(baselines, arch, env.gpu_name, matrix):
            continue
        try:
            base = load_for_model(baselines, arch, env.gpu_name, [matrix])
        except (SchemaError, OSError):
            continue
        check_baseline_gate(base, env, measured, strict=strict_env)


def first_run_on_model(command: str, run_dir: Path, baselines: str | Path, arch: str,
                       model: str, reference: str) -> str:
    """What a run on a GPU model without a baseline of its own prints: how its speed is
    judged, and how to record that model's baseline (``results.models``)."""
    where = model_dir(Path(baselines) / arch, model)
    return (f"{command}: no {arch} baseline of {model!r} yet (the rows are "
            f"{reference!r}'s): its speed is judged on this runner by `harness job` (the "
            "baseline's commit measured here, docs/measurement.md §16), never by a plain "
            "bench. To give this model its own baseline (then the usual gate, no A/B "
            f"unless rows move): A/A runs of one commit, >= 4 processes on >= 3 machines of "
            f"this model, `harness baseline record --runs R1 R2 R3 R4 --root {baselines}`, "
            f"or this run alone: `harness baseline accept {run_dir} --root {baselines} --yes`; "
            f"either writes {where}/")


def plain(doc: str | None) -> str:
    """A module docstring as plain ``--help`` text: reST double backticks and the
    ``:role:`` markers dropped (``harness bench`` -> harness bench)."""
    text = doc or ""
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", text)
    return text.replace("``", "")
