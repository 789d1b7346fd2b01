"""Promoting a run to its arch's (or its GPU model's) baseline: ``harness baseline
accept``'s engine. The gate table against the previous baseline is printed first, then
the caller's ``confirm`` is asked before anything is written; ``--only-faster`` and
``--paths`` take only some rows (``baseline_rows``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..config import Settings
from ..reports.calibration import run_identity
from ..reports.gate import evaluate
from ..reports.markdown import text_table
from ..reports.verdicts import Verdict
from ..results.baseline import (
    BaselineMeta,
    BaselineNotFoundError,
    baseline_settings,
    read_baseline_matrix,
    run_arch,
    run_settings,
    write_baseline_matrix,
)
from ..results.environment import (
    Environment,
    IncompatibleBaselineError,
    check_environment,
    warning_lines,
)
from ..results.schema import Key, ResultRow, SchemaError
from ..results.store import Run, now_iso
from ..results.writer import DirLock
from .baseline_rows import RowFilter, previous_baselines, select_rows, where_to


def _run_name(run: Run, matrix: str) -> str:
    """A source run named by commit, GPU uuid and date (no local path)."""
    meta = run.metas.get(matrix)
    ident = run_identity(meta.environment if meta else run.environment,
                         meta.created if meta else "")
    return ", ".join(f"{k} {v}" for k, v in ident.items() if v and k != "machine") or run.label


def one_machine_caution(matrix: str, faster: int, env: Environment) -> str:
    """The line ``accept --only-faster`` prints when it takes FASTER rows: one run is one
    machine, and a machine faster than the baseline's reads FASTER on unchanged code (three
    fp16_cache rows at -3.2..-3.5% on an unchanged H100, docs/measurement.md §9.17); such
    rows make the baseline faster than other machines of the model, whose jobs then read
    them SLOWER and pay the A/B that clears them. ``record --only-faster`` takes each
    row's medoid over runs of several machines."""
    where = f"GPU {env.gpu_uuid}" if env.gpu_uuid else "one GPU"
    return (f"{matrix}: {faster} FASTER row(s) taken from one run ({where}): a machine faster "
            "than the baseline's reads FASTER on unchanged code; to take only what every "
            "machine reads, use `harness baseline record --only-faster --runs R1 R2 ...` "
            "over runs of two or more fresh machines")


def accept(
    run: Run, root: str | Path, settings: Settings, *, arch: str | None = None,
    echo: Callable[[str], None] = print, confirm: Callable[[], bool] | None = None,
    only_faster: bool = False, paths: Sequence[str] = (), reference: bool = False,
) -> list[Path]:
    """Promote ``run`` to the baseline of its arch, printing the diff against the old one.

    The baseline of its GPU model: the arch's folder when that holds no baseline yet or
    one of the same model (or with ``reference``: ``--reference``), else the model's own
    folder under ``<arch>/models/`` (``results.models.target_dir``).

    ``confirm()`` is asked after every diff is printed and before anything is written
    (None: write without asking, ``harness baseline accept --yes``).

    Noise margins of the previous baseline are kept for the keys still present when the
    environments are comparable under ``check_environment`` (recalibrate after an
    environment change: its warnings are printed); a previous baseline it refuses is
    replaced without a diff. The baseline's settings are the run's ``run_settings`` (its
    settings, timing modes and CPU threads), so later comparisons can check them.

    ``only_faster`` / ``paths`` (``harness baseline accept --only-faster --paths``): per
    key the run's row replaces the previous baseline's only where the gate above reads it
    FASTER / where its path is one of ``paths`` (keys the baseline lacks are added); the
    other keys keep the previous row as it was (``baseline_rows``), a summary line per
    matrix says how many of each, and the json's ``source`` which rows came from where.
    They need a comparable previous baseline of every matrix (one-line error otherwise).
    """
    only = RowFilter(only_faster, tuple(paths))
    arch = run_arch(run, arch)
    directory = where_to(root, arch, run, reference, echo)
    written: list[Path] = []
    pending: list[tuple[list[ResultRow], BaselineMeta]] = []
    with DirLock(directory):
        previous = (previous_baselines(directory, run.matrices, only, {r.path for r in run.rows})
                    if only.active else {})
        for matrix in run.matrices:
            rows = [r for r in run.rows if r.matrix == matrix]
            source = _run_name(run, matrix)
            env = (run.metas[matrix].environment if matrix in run.metas else Environment())
            env = env.with_fallbacks(arch=arch, gpu_name=rows[0].device_name if rows else "",
                                     commit=rows[0].commit if rows else "")
            margins: dict[Key, float] = {}
            calibration: Mapping[str, object] = {}
            try:
                old_rows, old_meta = (previous[matrix] if only.active
                                      else read_baseline_matrix(directory, matrix))
            except BaselineNotFoundError:
                echo(f"{matrix}: no previous baseline in {directory}; accepting {len(rows)} rows")
            except SchemaError as exc:
                echo(f"{matrix}: previous baseline unreadable ({exc}); replacing it")
            else:
                try:
                    warnings = check_environment(old_meta.environment, env,
                                                 baseline_settings(old_meta),
                                                 run_settings(run, matrix),
                                                 what="previous baseline")
                except IncompatibleBaselineError as exc:
                    if only.active:
                        raise IncompatibleBaselineError(
                            f"{matrix}: {exc}; {only.describe()} cannot judge rows against "
                            "it") from None
                    warnings = None
                    echo(f"{matrix}: {exc}; replacing it without a diff")
                if warnings is not None:
                    for line in warning_lines(f"harness baseline accept: {matrix}", warnings):
                        echo(line)
                    result = evaluate(rows, old_rows, settings, margins=old_meta.noise_margins,
                                      baseline_label="old baseline", current_label=run.label)
                    echo(f"{matrix}: changes against the previous baseline:")
                    echo(text_table(result, changes_only=True))
                    if only.active:
                        chosen = select_rows(matrix, result, rows, old_rows, only)
                        for line in chosen.lines():
                            echo(line)
                        faster = chosen.replaced.get(Verdict.FASTER, 0)
                        if faster:
                            echo(one_machine_caution(matrix, faster, env))
                        if chosen.n_new == 0:   # its json would name a run it took nothing of
                            echo(f"{matrix}: no row taken; its baseline is left as it was")
                            continue
                        rows = list(chosen.rows)
                        source = chosen.source(source, old_meta.source)
                    keys = {r.key for r in rows}
                    margins = {k: v for k, v in old_meta.noise_margins.items() if k in keys}
                    calibration = old_meta.calibration
            meta = BaselineMeta(
                matrix=matrix, arch=arch, environment=env, rows_sha256="", noise_margins=margins,
                settings=run_settings(run, matrix) if matrix in run.metas else settings.to_dict(),
                source=source,
                accepted=now_iso(), calibration=calibration,
            )
            pending.append((rows, meta))
        if confirm is not None and not confirm():
            echo("harness baseline accept: nothing written (not confirmed)")
            return []
        for rows, meta in pending:
            written.append(write_baseline_matrix(directory, rows, meta))
            echo(f"{meta.matrix}: baseline written to {written[-1]}")
    return written
