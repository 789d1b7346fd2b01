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
from .environment import Environment, check_compatible, incompatibility
from .schema import ResultRow, SchemaError
from .stats import Key, median, noise_margins
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


def accept(
    run: Run, root: str | Path, settings: Settings, *, arch: str | None = None,
    echo: Callable[[str], None] = print,
) -> list[Path]:
    """Promote ``run`` to the baseline of its arch, printing the diff against the old one.

    Noise margins of the previous baseline are kept for the keys still present when the
    environments are comparable (recalibrate after an environment change).
    """
    from .gate import evaluate
    from .markdown import text_table

    arch = run_arch(run, arch)
    directory = Path(root) / arch
    written = []
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
                reason = incompatibility(old_meta.environment, env)
                if reason:
                    echo(f"{matrix}: previous baseline not comparable ({reason}); replacing it")
                else:
                    result = evaluate(rows, old_rows, settings, margins=old_meta.noise_margins,
                                      baseline_label="old baseline", current_label=run.label)
                    echo(f"{matrix}: changes against the previous baseline:")
                    echo(text_table(result, changes_only=True))
                    keys = {r.key for r in rows}
                    margins = {k: v for k, v in old_meta.noise_margins.items() if k in keys}
                    calibration = old_meta.calibration
            meta = BaselineMeta(
                matrix=matrix, arch=arch, environment=env, rows_sha256="", noise_margins=margins,
                settings=dict(run.metas[matrix].settings) if matrix in run.metas else settings.to_dict(),
                source=str(run.csv_paths[0] if len(run.csv_paths) == 1 else run.source),
                accepted=now_iso(), calibration=calibration,
            )
            written.append(write_baseline_matrix(directory, rows, meta))
            echo(f"{matrix}: baseline written to {written[-1]}")
    return written


def _row_median(row: ResultRow) -> float:
    s = row.samples()
    return median(s) if s else row.time_us_median


def calibrate(
    run_paths: Sequence[str | Path], root: str | Path, settings: Settings, *,
    arch: str | None = None, quantile: float = 95.0, echo: Callable[[str], None] = print,
) -> dict[str, dict[Key, float]]:
    """Noise margins from N A/A runs of one commit, stored in the baseline json(s).

    Each key's margin is the ``quantile`` percentile of |relative median difference| over
    every pair of runs, floored at ``settings.noise_margin_floor``.
    """
    if len(run_paths) < 2:
        raise ValueError(f"--runs: calibration needs at least 2 A/A runs, got {len(run_paths)}")
    runs = [load_run(p) for p in run_paths]
    commits = {r.environment.commit for r in runs}
    if len(commits) > 1:
        raise ValueError("--runs: A/A calibration needs runs of one commit; got " + ", ".join(sorted(commits)))
    for other in runs[1:]:
        check_compatible(runs[0].environment, other.environment, what=f"A/A run {other.source}")
    arch = run_arch(runs[0], arch)
    directory = Path(root) / arch
    out: dict[str, dict[Key, float]] = {}
    with DirLock(directory):
        for matrix in runs[0].matrices:
            rows, meta = read_baseline_matrix(directory, matrix)
            check_compatible(meta.environment, runs[0].environment)
            per_run = [{r.key: _row_median(r) for r in run.rows if r.matrix == matrix and r.status == "ok"}
                       for run in runs]
            margins = noise_margins(per_run, settings.noise_margin_floor, quantile)
            merged = dict(meta.noise_margins) | margins
            info = {"runs": len(runs), "commit": next(iter(commits)), "quantile": quantile,
                    "floor": settings.noise_margin_floor, "date": now_iso(),
                    "sources": [str(p) for p in run_paths]}
            write_baseline_matrix(directory, rows, replace(meta, noise_margins=merged, calibration=info))
            out[matrix] = margins
            if margins:
                worst = max(margins, key=margins.get)
                echo(f"{matrix}: {len(margins)} noise margins from {len(runs)} runs; median "
                     f"{median(list(margins.values())):.2%}, largest {margins[worst]:.2%} at {'/'.join(worst)}")
            else:
                echo(f"{matrix}: no key timed in two runs; margins unchanged")
    return out


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
