"""A/A calibration of baselines, behind ``harness baseline record | calibrate | lomo``:
load N A/A runs of one commit, record a baseline from them (medoid rows, margins), replace
the margins of an existing one, or check the margins leave-one-machine-out. The statistics
are ``harness.reports.calibration``'s; this module reads and writes the files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from ..reports.calibration import (
    DEFAULT_COVERAGE,
    DEFAULT_PRIOR_DF,
    KeySpread,
    leave_one_machine_out,
    machines_of,
    medoid_rows,
    run_identity,
    run_medians,
    spreads,
)
from ..reports.gate import evaluate
from ..reports.markdown import text_table
from ..reports.stats import median
from ..results.baseline import (
    BaselineMeta,
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
from ..results.schema import Key, ResultRow
from ..results.store import Run, load_run, now_iso
from ..results.writer import DirLock
from .baseline_rows import RowFilter, previous_baselines, select_rows, where_to
from .revisions import MEASURED_CODE, same_measured_code


def _load_aa_runs(run_paths: Sequence[str | Path], echo: Callable[[str], None] = print,
                  same_code: Path | None = None) -> tuple[list[Run], str | None]:
    """Stored A/A runs of one commit, in comparable environments (one-line errors;
    ``check_environment``'s warnings are echoed), and None. ``same_code`` (a git
    repository): runs of several commits are taken when those commits measured the same
    code (``engines.revisions.same_measured_code``), with the newest of them, which the
    baseline then names."""
    if len(run_paths) < 2:
        raise ValueError(f"--runs: calibration needs at least 2 A/A runs, got {len(run_paths)}")
    runs = [load_run(p) for p in run_paths]
    commits = {r.environment.commit for r in runs}
    if len(commits) > 1 and same_code is None:
        raise ValueError("--runs: A/A calibration needs runs of one commit (or --same-code); "
                         "got " + ", ".join(sorted(commits)))
    named = None
    if len(commits) > 1:
        named = same_measured_code(same_code, sorted(commits))
        echo(f"harness baseline: runs of {len(commits)} commits with the same measured code "
             f"({', '.join(MEASURED_CODE)}): the baseline names {named[:12]}")
    warnings: list[str] = []
    for matrix, holding in _by_matrix(runs).items():   # each matrix's own recorded env
        first = holding[0]
        for other in holding[1:]:
            warnings += check_environment(
                _env(first, matrix), _env(other, matrix), run_settings(first, matrix),
                run_settings(other, matrix), what=f"A/A run {first.source} ({matrix})",
                current=f"A/A run {other.source}")
    for line in warning_lines("harness baseline", dict.fromkeys(warnings)):
        echo(line)
    return runs, named


def _by_matrix(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """matrix -> the runs that hold it, in the order given (a run directory may hold only
    some matrices: the job's runs and a separate parity/edges run of one machine)."""
    out: dict[str, list[Run]] = {}
    for run in runs:
        for matrix in run.matrices:
            out.setdefault(matrix, []).append(run)
    return out


def _env(run: Run, matrix: str):
    """The environment recorded with ``matrix`` of ``run`` (a directory may hold matrices
    measured by different processes), else the run's."""
    return run.metas[matrix].environment if matrix in run.metas else run.environment


def _calibration_info(runs: Sequence[Run], matrix: str, coverage: float, prior_df: float,
                      floor: float, spread: Mapping[Key, KeySpread]) -> dict:
    machines = machines_of([_env(r, matrix) for r in runs])
    margins = [s.margin for s in spread.values()]
    return {
        "method": "moderated log-spread, one-sided prediction bound (harness.reports.calibration)",
        "coverage": coverage, "prior_df": prior_df, "floor": floor, "date": now_iso(),
        "runs": len(runs), "machines": len(set(machines)),
        # each run as the process that measured this matrix recorded itself (a directory
        # may hold matrices of several processes: the job's and a later parity bench)
        "sources": [run_identity(_env(r, matrix),
                                 r.metas[matrix].created if matrix in r.metas else "")
                    for r in runs],
        "margin_median": median(margins) if margins else None,
        "margin_max": max(margins) if margins else None,
    }


def _spreads_for(runs: Sequence[Run], matrix: str, settings: Settings, coverage: float,
                 prior_df: float) -> dict[Key, KeySpread]:
    machines = machines_of([_env(r, matrix) for r in runs])
    return spreads([run_medians(r.rows, matrix) for r in runs], machines, coverage=coverage,
                   prior_df=prior_df, floor=settings.noise_margin_floor)


def _say_margins(echo, matrix: str, runs: int, machines: int,
                 spread: Mapping[Key, KeySpread]) -> None:
    if not spread:
        echo(f"{matrix}: no key timed in two runs; margins unchanged")
        return
    margins = {k: s.margin for k, s in spread.items()}
    worst = max(margins, key=margins.get)
    echo(f"{matrix}: {len(margins)} noise margins from {runs} runs on {machines} machine(s); "
         f"median {median(list(margins.values())):.2%}, "
         f"largest {margins[worst]:.2%} at {'/'.join(worst)}")


def calibrate(
    run_paths: Sequence[str | Path], root: str | Path, settings: Settings, *,
    arch: str | None = None, coverage: float = DEFAULT_COVERAGE, prior_df: float = DEFAULT_PRIOR_DF,
    echo: Callable[[str], None] = print, same_code: Path | None = None,
) -> dict[str, dict[Key, float]]:
    """Noise margins from N A/A runs of one commit (``harness.reports.calibration``; or
    of several with ``same_code``, as ``record``), stored in the existing baseline
    json(s); the baseline rows are kept."""
    all_runs, _ = _load_aa_runs(run_paths, echo, same_code)
    arch = run_arch(all_runs[0], arch)
    directory = where_to(root, arch, all_runs[0], False, echo)   # the runs' model's baseline
    out: dict[str, dict[Key, float]] = {}
    with DirLock(directory):
        for matrix, runs in _by_matrix(all_runs).items():
            rows, meta = read_baseline_matrix(directory, matrix)
            warnings = check_environment(meta.environment, _env(runs[0], matrix),
                                         baseline_settings(meta), run_settings(runs[0], matrix),
                                         current="A/A runs")
            for line in warning_lines(f"harness baseline calibrate: {matrix}", warnings):
                echo(line)
            spread = _spreads_for(runs, matrix, settings, coverage, prior_df)
            margins = {k: s.margin for k, s in spread.items()}
            info = _calibration_info(runs, matrix, coverage, prior_df,
                                     settings.noise_margin_floor, spread)
            write_baseline_matrix(directory, rows, replace(
                meta, noise_margins=dict(meta.noise_margins) | margins, calibration=info))
            out[matrix] = margins
            _say_margins(echo, matrix, len(runs), info["machines"], spread)
    return out


def record(
    run_paths: Sequence[str | Path], root: str | Path, settings: Settings, *,
    arch: str | None = None, coverage: float = DEFAULT_COVERAGE, prior_df: float = DEFAULT_PRIOR_DF,
    echo: Callable[[str], None] = print, only_faster: bool = False, paths: Sequence[str] = (),
    reference: bool = False, same_code: Path | None = None,
) -> list[Path]:
    """A new baseline from N A/A runs of one commit: per key the medoid run's row (the run
    whose median is nearest the runs' median) and margins from all of them. The json names
    every source run by commit, GPU uuid, host, boot id and date. It is the baseline of
    the runs' GPU model (``baseline_rows.where_to``: ``<arch>/models/<model>/`` unless the
    model is the arch's reference, or ``reference``).

    ``only_faster`` / ``paths`` (``--only-faster``, ``--paths``): the medoid rows are gated
    against the previous baseline (its margins) and replace its rows only where they read
    FASTER / are of ``paths``; keys it lacks are added, every other key keeps its previous
    row as it was (``baseline_rows``). The noise margins still come from the A/A runs for
    every key they timed, kept rows included: they describe the machines' noise, which
    holds for a kept row as well; a kept key the runs did not time keeps its previous
    margin. Nothing is written when a matrix has no comparable previous baseline or
    ``paths`` names a path of neither side (one-line errors).

    ``same_code`` (``--same-code``, a git repository): the runs may be of several commits
    that measured the same code; the baseline's rows and environment then name the newest
    of them (what the job's A/B builds), and its sources each run's own commit."""
    only = RowFilter(only_faster, tuple(paths))
    all_runs, named = _load_aa_runs(run_paths, echo, same_code)
    arch = run_arch(all_runs[0], arch)
    directory = where_to(root, arch, all_runs[0], reference, echo)
    pending = []
    with DirLock(directory):
        by_matrix = _by_matrix(all_runs)
        previous = (previous_baselines(directory, by_matrix, only,
                                       {r.path for run in all_runs for r in run.rows})
                    if only.active else {})
        for matrix, runs in by_matrix.items():
            per_run = [[r for r in run.rows if r.matrix == matrix] for run in runs]
            rows, _ = medoid_rows(per_run)
            spread = _spreads_for(runs, matrix, settings, coverage, prior_df)
            info = _calibration_info(runs, matrix, coverage, prior_df,
                                     settings.noise_margin_floor, spread)
            first = runs[0].metas.get(matrix)
            env = (first.environment if first else runs[0].environment).with_fallbacks(arch=arch)
            margins = {k: s.margin for k, s in spread.items()}
            source = f"{len(runs)} A/A runs of {env.commit[:12]} (calibration.sources)"
            if named:           # the same measured code, several commits: one names them
                env = replace(env, commit=named[:12])
                rows = [replace(r, commit=named[:12]) for r in rows]
                source = (f"{len(runs)} A/A runs of {len({_env(r, matrix).commit for r in runs})}"
                          f" commits with the same measured code, named {named[:12]} "
                          "(calibration.sources)")
            if only.active:
                rows, margins, source = _keep_previous(matrix, runs[0], env, rows, margins,
                                                       source, previous[matrix], only,
                                                       settings, echo)
            meta = BaselineMeta(
                matrix=matrix, arch=arch, environment=env, rows_sha256="",
                noise_margins=margins,
                settings=run_settings(runs[0], matrix) if first else settings.to_dict(),
                source=source, accepted=now_iso(), calibration=info)
            pending.append((rows, meta, len(runs), info, spread))
        written = []
        for rows, meta, n_runs, info, spread in pending:
            written.append(write_baseline_matrix(directory, rows, meta))
            _say_margins(echo, meta.matrix, n_runs, info["machines"], spread)
            echo(f"{meta.matrix}: baseline written to {written[-1]}")
    return written


def _keep_previous(
    matrix: str, run: Run, env: Environment, rows: list[ResultRow], margins: dict[Key, float],
    source: str, previous: tuple[list[ResultRow], BaselineMeta], only: RowFilter,
    settings: Settings, echo: Callable[[str], None],
) -> tuple[list[ResultRow], dict[Key, float], str]:
    """``record``'s rows, margins and source under ``only``: the medoid ``rows`` gated
    against the ``previous`` baseline of ``matrix`` (its margins), ``baseline_rows``
    choosing per key; margins of the A/A runs where they have one, else the previous."""
    old_rows, old_meta = previous
    try:
        warnings = check_environment(old_meta.environment, env, baseline_settings(old_meta),
                                     run_settings(run, matrix), what="previous baseline",
                                     current="A/A runs")
    except IncompatibleBaselineError as exc:
        raise IncompatibleBaselineError(f"{matrix}: {exc}; {only.describe()} cannot judge "
                                        "rows against it") from None
    for line in warning_lines(f"harness baseline record: {matrix}", warnings):
        echo(line)
    result = evaluate(rows, old_rows, settings, margins=old_meta.noise_margins,
                      baseline_label="old baseline", current_label="A/A medoid rows")
    echo(f"{matrix}: changes against the previous baseline:")
    echo(text_table(result, changes_only=True))
    chosen = select_rows(matrix, result, rows, old_rows, only)
    for line in chosen.lines():
        echo(line)
    keys = {r.key for r in chosen.rows}
    kept = {k: v for k, v in old_meta.noise_margins.items() if k in keys and k not in margins}
    return (list(chosen.rows), kept | {k: v for k, v in margins.items() if k in keys},
            chosen.source(source, old_meta.source))


def lomo_table(run_paths: Sequence[str | Path], settings: Settings, *, coverage: float,
               prior_df: float, planted: float, modes: Sequence[str],
               screen: float | None = None,
               same_code: Path | None = None) -> tuple[list[str], bool]:
    """The leave-one-machine-out check as printable lines, and whether it held: no false
    SLOWER in any held-out run and each planted slowdown caught in >= 95% of its rows with
    no other row failing. With ``screen`` (the job's A/B confirmation): the lines also
    count the rows its screen sends to A/B, and "caught" is judged on them (A/B on one
    machine decides a screened row; an unchanged build is cleared there)."""
    all_runs, _ = _load_aa_runs(run_paths, same_code=same_code)
    lines = [f"leave-one-machine-out: {len(all_runs)} run directories on "
             f"{len(set(machines_of([r.environment for r in all_runs])))} machine(s), "
             f"coverage {coverage}, prior_df {prior_df:g}, planted +{planted:.0%}, "
             f"modes {','.join(modes)}"]
    ok, checked = True, 0
    for matrix, runs in _by_matrix(all_runs).items():
        machines = machines_of([r.environment for r in runs])
        per_run = [[r for r in run.rows if r.matrix == matrix] for run in runs]
        if not any(r.mode in modes for rows in per_run for r in rows):
            lines.append(f"{matrix}: no rows in modes {','.join(modes)} (its modes: "
                         f"{','.join(sorted({r.mode for rows in per_run for r in rows}))}); "
                         "not checked")
            continue
        checked += 1
        held = leave_one_machine_out(per_run, machines, settings, coverage=coverage,
                                     prior_df=prior_df, planted=planted, gate_modes=modes,
                                     screen=screen)
        if not held:
            lines.append(f"{matrix}: fewer than 3 machines' worth of runs; nothing held out")
            ok = False
        for h in held:
            plants = "; ".join(f"{p} {c}/{n}" + (f" (+{o} other)" if o else "")
                               for p, (c, n, o) in h.planted.items())
            line = (f"{matrix} held out {h.machine[:24]} run {h.run}: {h.gated} rows, "
                    f"false SLOWER {h.false_slower}, FASTER {h.faster}, "
                    f"worst change/threshold {h.worst_ratio:.2f}; planted caught: {plants}")
            if screen is None:
                ok &= h.false_slower == 0 and all(o == 0 and (n == 0 or c >= 0.95 * n)
                                                  for c, n, o in h.planted.values())
            else:
                shown = "; ".join(f"{p} {h.planted_screened.get(p, 0)}/{n}"
                                  for p, (_, n, _) in h.planted.items())
                line += (f" | A/B screen {screen:.1%}: {h.screened} unchanged row(s) to A/B; "
                         f"planted screened: {shown}")
                ok &= all(n == 0 or h.planted_screened.get(p, 0) >= 0.95 * n
                          for p, (_, n, _) in h.planted.items())
            lines.append(line)
    return lines, ok and checked > 0
