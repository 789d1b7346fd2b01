"""Baselines: ``baselines/<arch>/<matrix>.csv`` + ``<matrix>.json``.

The CSV is a result CSV (same schema as a run). The json (``BaselineMeta``) records the
environment it was measured in (GPU, compute capability, torch, CUDA, driver, quanto,
commit, date), the run it came from, the settings, the per-(case, path, mode) noise
margins from A/A calibration, and the SHA-256 of the CSV so a half-finished promotion is
detected instead of gated against.

``accept`` promotes a run (printing the gate table against the previous baseline first);
``calibrate`` measures noise margins from N A/A runs of one commit into the json.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import Settings
from .calibration import (
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
from .environment import (
    Environment,
    IncompatibleBaselineError,
    check_environment,
    measured_settings,
    warning_lines,
)
from .schema import ResultRow, SchemaError
from .stats import Key, median
from .store import (
    Run,
    atomic_write_text,
    load_run,
    now_iso,
    parse_csv_text,
    read_json,
    read_text,
    rows_to_csv_text,
    safe_component,
    write_json,
)
from .writer import DirLock

BASELINE_SCHEMA_VERSION = 1


class BaselineNotFoundError(FileNotFoundError):
    """No baseline where one was asked for (one-line message)."""


def _key_text(key: Key) -> str:
    return "|".join(key)


def _key_parse(text: str, source: str) -> Key:
    parts = text.split("|")
    if len(parts) != 3 or not all(parts):
        raise SchemaError(f"{source}: field 'noise_margins' has a bad key {text!r} (want case|path|mode)")
    return (parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class BaselineMeta:
    """The json beside a baseline CSV."""

    matrix: str
    arch: str
    environment: Environment
    rows_sha256: str
    noise_margins: Mapping[Key, float] = field(default_factory=dict)
    settings: Mapping[str, object] = field(default_factory=dict)
    source: str = ""
    accepted: str = ""
    calibration: Mapping[str, object] = field(default_factory=dict)
    schema_version: int = BASELINE_SCHEMA_VERSION

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version, "matrix": self.matrix, "arch": self.arch,
            "environment": self.environment.to_dict(), "rows_sha256": self.rows_sha256,
            "noise_margins": {_key_text(k): float(v) for k, v in sorted(self.noise_margins.items())},
            "settings": dict(self.settings), "source": self.source, "accepted": self.accepted,
            "calibration": dict(self.calibration),
        }

    @classmethod
    def from_dict(cls, d: object, source: str) -> BaselineMeta:
        if not isinstance(d, dict):
            raise SchemaError(f"{source}: top level must be a JSON object")
        version = d.get("schema_version")
        if version != BASELINE_SCHEMA_VERSION or isinstance(version, bool):
            raise SchemaError(f"{source}: field 'schema_version' is {version!r}, expected {BASELINE_SCHEMA_VERSION}")
        for name in ("matrix", "arch", "rows_sha256"):
            if not isinstance(d.get(name), str) or not d.get(name):
                raise SchemaError(f"{source}: field {name!r} is missing or not a string")
        margins_raw = d.get("noise_margins", {})
        if not isinstance(margins_raw, dict):
            raise SchemaError(f"{source}: field 'noise_margins' must be an object")
        margins = {}
        for k, v in margins_raw.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SchemaError(f"{source}: field 'noise_margins.{k}' is not a non-negative number ({v!r})")
            margins[_key_parse(k, source)] = float(v)
        for name in ("settings", "calibration"):
            if not isinstance(d.get(name, {}), dict):
                raise SchemaError(f"{source}: field {name!r} must be an object")
        return cls(
            matrix=d["matrix"], arch=d["arch"], rows_sha256=d["rows_sha256"],
            environment=Environment.from_dict(d.get("environment"), source),
            noise_margins=margins, settings=d.get("settings", {}), source=str(d.get("source", "")),
            accepted=str(d.get("accepted", "")), calibration=d.get("calibration", {}),
        )


@dataclass(frozen=True)
class Baseline:
    """The baseline rows of one arch (one or more matrices) and their metadata."""

    directory: Path
    rows: tuple[ResultRow, ...]
    metas: Mapping[str, BaselineMeta]

    @property
    def environment(self) -> Environment:
        return next(iter(self.metas.values())).environment if self.metas else Environment()

    @property
    def margins(self) -> dict[Key, float]:
        """Noise margins of all matrices (the larger one where a key is in several)."""
        out: dict[Key, float] = {}
        for meta in self.metas.values():
            for k, v in meta.noise_margins.items():
                out[k] = max(v, out.get(k, 0.0))
        return out

    @property
    def label(self) -> str:
        env = self.environment
        return f"baseline {env.commit[:12]}" if env.commit else f"baseline {self.directory}"


def run_settings(run: Run, matrix: str | None = None) -> dict:
    """The settings ``matrix`` of ``run`` was measured with (``measured_settings`` of its json:
    settings, timing modes, CPU threads); the first matrix's when None; {} without a json."""
    metas = run.metas
    meta = metas.get(matrix) if matrix is not None else next(iter(metas.values()), None)
    return measured_settings(meta.settings, meta.extra) if meta is not None else {}


def check_baseline(
    base: Baseline, env: Environment, settings_of: Callable[[str], Mapping] | Mapping | None = None,
    *, strict: bool = False, what: str = "baseline",
) -> list[str]:
    """``check_environment`` of ``env`` against every matrix of ``base``; the warnings, once each.

    ``settings_of`` gives the current settings: one dict for every matrix, or a function
    of the matrix name (e.g. ``lambda m: run_settings(run, m)``).
    """
    warnings: list[str] = []
    for name, meta in base.metas.items():
        cur = settings_of(name) if callable(settings_of) else settings_of
        for w in check_environment(meta.environment, env, meta.settings, cur, strict=strict, what=what):
            if w not in warnings:
                warnings.append(w)
    return warnings


def baseline_dir(root: str | Path, arch: str) -> Path:
    """``root/<arch>`` (``root`` is usually ``baselines``); ``root`` itself if it is one."""
    root = Path(root)
    if (root / safe_component(arch, "arch")).is_dir() or not any(root.glob("*.json")):
        return root / arch
    return root


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_baseline_matrix(directory: Path, matrix: str) -> tuple[list[ResultRow], BaselineMeta]:
    csv_path, json_path = directory / f"{matrix}.csv", directory / f"{matrix}.json"
    if not csv_path.is_file():
        raise BaselineNotFoundError(f"no baseline for matrix {matrix!r}: {csv_path} does not exist")
    meta = BaselineMeta.from_dict(read_json(json_path, "baseline json"), str(json_path))
    text = read_text(csv_path, "baseline CSV")
    if _sha(text) != meta.rows_sha256:
        raise SchemaError(f"{csv_path}: does not match rows_sha256 in {json_path.name} "
                          "(edited by hand or an interrupted accept); run `harness baseline accept` again")
    return parse_csv_text(text, str(csv_path)), meta


def load_baseline(directory: str | Path, matrices: Sequence[str] | None = None) -> Baseline:
    """Read the baseline of ``matrices`` (default: every matrix there) from one arch dir."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BaselineNotFoundError(f"no baseline directory {directory}")
    names = list(matrices) if matrices else sorted(p.stem for p in directory.glob("*.csv"))
    if not names:
        raise BaselineNotFoundError(f"{directory} holds no baseline CSV")
    rows: list[ResultRow] = []
    metas: dict[str, BaselineMeta] = {}
    for name in names:
        part, meta = read_baseline_matrix(directory, name)
        rows += part
        metas[name] = meta
    return Baseline(directory, tuple(rows), metas)


def write_baseline_matrix(directory: Path, rows: Sequence[ResultRow], meta: BaselineMeta) -> Path:
    """CSV then json, each atomic; the json's checksum makes the pair consistent."""
    text = rows_to_csv_text(rows)
    meta = replace(meta, rows_sha256=_sha(text))
    csv_path = directory / f"{safe_component(meta.matrix, 'matrix')}.csv"
    atomic_write_text(csv_path, text)
    write_json(csv_path.with_suffix(".json"), meta.to_dict())
    return csv_path


def run_arch(run: Run, arch: str | None = None) -> str:
    arch = arch or run.environment.arch
    if not arch:
        raise ValueError(f"{run.source}: the run does not record its arch; pass --arch")
    return safe_component(arch, "arch")


def _run_name(run: Run, matrix: str) -> str:
    """A source run named by commit, GPU uuid and date (no local path)."""
    meta = run.metas.get(matrix)
    ident = run_identity(meta.environment if meta else run.environment, meta.created if meta else "")
    return ", ".join(f"{k} {v}" for k, v in ident.items() if v and k != "machine") or run.label


def accept(
    run: Run, root: str | Path, settings: Settings, *, arch: str | None = None,
    echo: Callable[[str], None] = print, confirm: Callable[[], bool] | None = None,
) -> list[Path]:
    """Promote ``run`` to the baseline of its arch, printing the diff against the old one.

    ``confirm()`` is asked after every diff is printed and before anything is written
    (None: write without asking, ``harness baseline accept --yes``).

    Noise margins of the previous baseline are kept for the keys still present when the
    environments are comparable under ``check_environment`` (recalibrate after an
    environment change: its warnings are printed); a previous baseline it refuses is
    replaced without a diff. The baseline's settings are the run's ``run_settings`` (its
    settings, timing modes and CPU threads), so later comparisons can check them.
    """
    from .gate import evaluate
    from .markdown import text_table

    arch = run_arch(run, arch)
    directory = Path(root) / arch
    written: list[Path] = []
    pending: list[tuple[list[ResultRow], BaselineMeta]] = []
    with DirLock(directory):
        for matrix in run.matrices:
            rows = [r for r in run.rows if r.matrix == matrix]
            env = (run.metas[matrix].environment if matrix in run.metas else Environment())
            env = env.with_fallbacks(arch=arch, gpu_name=rows[0].device_name if rows else "",
                                     commit=rows[0].commit if rows else "")
            margins: dict[Key, float] = {}
            calibration: Mapping[str, object] = {}
            try:
                old_rows, old_meta = read_baseline_matrix(directory, matrix)
            except BaselineNotFoundError:
                echo(f"{matrix}: no previous baseline in {directory}; accepting {len(rows)} rows")
            except SchemaError as exc:
                echo(f"{matrix}: previous baseline unreadable ({exc}); replacing it")
            else:
                try:
                    warnings = check_environment(old_meta.environment, env, old_meta.settings,
                                                 run_settings(run, matrix), what="previous baseline")
                except IncompatibleBaselineError as exc:
                    warnings = None
                    echo(f"{matrix}: {exc}; replacing it without a diff")
                if warnings is not None:
                    for line in warning_lines(f"harness baseline accept: {matrix}", warnings):
                        echo(line)
                    result = evaluate(rows, old_rows, settings, margins=old_meta.noise_margins,
                                      baseline_label="old baseline", current_label=run.label)
                    echo(f"{matrix}: changes against the previous baseline:")
                    echo(text_table(result, changes_only=True))
                    keys = {r.key for r in rows}
                    margins = {k: v for k, v in old_meta.noise_margins.items() if k in keys}
                    calibration = old_meta.calibration
            meta = BaselineMeta(
                matrix=matrix, arch=arch, environment=env, rows_sha256="", noise_margins=margins,
                settings=run_settings(run, matrix) if matrix in run.metas else settings.to_dict(),
                source=_run_name(run, matrix),
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


def _load_aa_runs(run_paths: Sequence[str | Path], echo: Callable[[str], None] = print) -> list[Run]:
    """Stored A/A runs of one commit, in comparable environments (one-line errors;
    ``check_environment``'s warnings are echoed)."""
    if len(run_paths) < 2:
        raise ValueError(f"--runs: calibration needs at least 2 A/A runs, got {len(run_paths)}")
    runs = [load_run(p) for p in run_paths]
    commits = {r.environment.commit for r in runs}
    if len(commits) > 1:
        raise ValueError("--runs: A/A calibration needs runs of one commit; got " + ", ".join(sorted(commits)))
    warnings: list[str] = []
    for other in runs[1:]:
        warnings += check_environment(runs[0].environment, other.environment, run_settings(runs[0]),
                                      run_settings(other), what=f"A/A run {runs[0].source}",
                                      current=f"A/A run {other.source}")
    for line in warning_lines("harness baseline", dict.fromkeys(warnings)):
        echo(line)
    return runs


def _calibration_info(runs: Sequence[Run], matrix: str, coverage: float, prior_df: float,
                      floor: float, spread: Mapping[Key, KeySpread]) -> dict:
    machines = machines_of([r.environment for r in runs])
    margins = [s.margin for s in spread.values()]
    return {
        "method": "moderated log-spread, one-sided prediction bound (harness.reports.calibration)",
        "coverage": coverage, "prior_df": prior_df, "floor": floor, "date": now_iso(),
        "runs": len(runs), "machines": len(set(machines)),
        "sources": [run_identity(r.environment, r.metas[matrix].created if matrix in r.metas else "")
                    for r in runs],
        "margin_median": median(margins) if margins else math.nan,
        "margin_max": max(margins) if margins else math.nan,
    }


def _spreads_for(runs: Sequence[Run], matrix: str, settings: Settings, coverage: float,
                 prior_df: float) -> dict[Key, KeySpread]:
    machines = machines_of([r.environment for r in runs])
    return spreads([run_medians(r.rows, matrix) for r in runs], machines, coverage=coverage,
                   prior_df=prior_df, floor=settings.noise_margin_floor)


def _say_margins(echo, matrix: str, runs: int, machines: int, spread: Mapping[Key, KeySpread]) -> None:
    if not spread:
        echo(f"{matrix}: no key timed in two runs; margins unchanged")
        return
    margins = {k: s.margin for k, s in spread.items()}
    worst = max(margins, key=margins.get)
    echo(f"{matrix}: {len(margins)} noise margins from {runs} runs on {machines} machine(s); "
         f"median {median(list(margins.values())):.2%}, largest {margins[worst]:.2%} at {'/'.join(worst)}")


def calibrate(
    run_paths: Sequence[str | Path], root: str | Path, settings: Settings, *,
    arch: str | None = None, coverage: float = DEFAULT_COVERAGE, prior_df: float = DEFAULT_PRIOR_DF,
    echo: Callable[[str], None] = print,
) -> dict[str, dict[Key, float]]:
    """Noise margins from N A/A runs of one commit (``harness.reports.calibration``),
    stored in the existing baseline json(s); the baseline rows are kept."""
    runs = _load_aa_runs(run_paths, echo)
    arch = run_arch(runs[0], arch)
    directory = Path(root) / arch
    out: dict[str, dict[Key, float]] = {}
    with DirLock(directory):
        for matrix in runs[0].matrices:
            rows, meta = read_baseline_matrix(directory, matrix)
            warnings = check_environment(meta.environment, runs[0].environment, meta.settings,
                                         run_settings(runs[0], matrix), current="A/A runs")
            for line in warning_lines(f"harness baseline calibrate: {matrix}", warnings):
                echo(line)
            spread = _spreads_for(runs, matrix, settings, coverage, prior_df)
            margins = {k: s.margin for k, s in spread.items()}
            info = _calibration_info(runs, matrix, coverage, prior_df, settings.noise_margin_floor, spread)
            write_baseline_matrix(directory, rows, replace(
                meta, noise_margins=dict(meta.noise_margins) | margins, calibration=info))
            out[matrix] = margins
            _say_margins(echo, matrix, len(runs), info["machines"], spread)
    return out


def record(
    run_paths: Sequence[str | Path], root: str | Path, settings: Settings, *,
    arch: str | None = None, coverage: float = DEFAULT_COVERAGE, prior_df: float = DEFAULT_PRIOR_DF,
    echo: Callable[[str], None] = print,
) -> list[Path]:
    """A new baseline from N A/A runs of one commit: per key the medoid run's row (the run
    whose median is nearest the runs' median) and margins from all of them. The json names
    every source run by commit, GPU uuid, host, boot id and date."""
    runs = _load_aa_runs(run_paths, echo)
    arch = run_arch(runs[0], arch)
    directory = Path(root) / arch
    written = []
    with DirLock(directory):
        for matrix in runs[0].matrices:
            per_run = [[r for r in run.rows if r.matrix == matrix] for run in runs]
            rows, _ = medoid_rows(per_run)
            spread = _spreads_for(runs, matrix, settings, coverage, prior_df)
            info = _calibration_info(runs, matrix, coverage, prior_df, settings.noise_margin_floor, spread)
            first = runs[0].metas.get(matrix)
            env = (first.environment if first else runs[0].environment).with_fallbacks(arch=arch)
            meta = BaselineMeta(
                matrix=matrix, arch=arch, environment=env, rows_sha256="",
                noise_margins={k: s.margin for k, s in spread.items()},
                settings=run_settings(runs[0], matrix) if first else settings.to_dict(),
                source=f"{len(runs)} A/A runs of {env.commit[:12]} (calibration.sources)",
                accepted=now_iso(), calibration=info)
            written.append(write_baseline_matrix(directory, rows, meta))
            _say_margins(echo, matrix, len(runs), info["machines"], spread)
            echo(f"{matrix}: baseline written to {written[-1]}")
    return written


def show(directory: str | Path, echo: Callable[[str], None] = print) -> Baseline:
    """Print what a baseline directory holds."""
    base = load_baseline(directory)
    echo(f"{base.directory}: {base.environment.summary()}")
    for name, meta in base.metas.items():
        n = sum(1 for r in base.rows if r.matrix == name)
        margins = list(meta.noise_margins.values())
        cal = (f"{len(margins)} noise margins (median {median(margins):.2%}, max {max(margins):.2%}), "
               f"calibrated {meta.calibration.get('date', '?')} from {meta.calibration.get('runs', '?')} runs"
               if margins else "not calibrated (min_effect alone sets the speed threshold)")
        echo(f"  {name}: {n} rows, accepted {meta.accepted or '?'} from {meta.source or '?'}; {cal}")
    return base


def lomo_table(run_paths: Sequence[str | Path], settings: Settings, *, coverage: float,
               prior_df: float, planted: float, modes: Sequence[str]) -> tuple[list[str], bool]:
    """The leave-one-machine-out check as printable lines, and whether it held: no false
    SLOWER in any held-out run and each planted slowdown caught in >= 95% of its rows with
    no other row failing."""
    runs = _load_aa_runs(run_paths)
    machines = machines_of([r.environment for r in runs])
    lines = [f"leave-one-machine-out: {len(runs)} runs on {len(set(machines))} machine(s), "
             f"coverage {coverage}, prior_df {prior_df:g}, planted +{planted:.0%}, modes {','.join(modes)}"]
    ok = True
    for matrix in runs[0].matrices:
        per_run = [[r for r in run.rows if r.matrix == matrix] for run in runs]
        held = leave_one_machine_out(per_run, machines, settings, coverage=coverage,
                                     prior_df=prior_df, planted=planted, gate_modes=modes)
        if not held:
            lines.append(f"{matrix}: fewer than 3 machines' worth of runs; nothing held out")
            ok = False
        for h in held:
            plants = "; ".join(f"{p} {c}/{n}" + (f" (+{o} other)" if o else "")
                               for p, (c, n, o) in h.planted.items())
            lines.append(f"{matrix} held out {h.machine[:24]} run {h.run}: {h.gated} rows, "
                         f"false SLOWER {h.false_slower}, FASTER {h.faster}, worst change/threshold "
                         f"{h.worst_ratio:.2f}; planted caught: {plants}")
            ok &= h.false_slower == 0 and all(o == 0 and (n == 0 or c >= 0.95 * n)
                                              for c, n, o in h.planted.values())
    return lines, ok
