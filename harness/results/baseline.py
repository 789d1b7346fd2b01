"""Baseline files: ``baselines/<arch>/<matrix>.csv`` + ``<matrix>.json``.

The CSV is a result CSV (same schema as a run). The json (``BaselineMeta``) records the
environment it was measured in (GPU, compute capability, torch, CUDA, driver, quanto,
commit, date), the run it came from, the settings, the per-(case, path, mode) noise
margins from A/A calibration, and the SHA-256 of the CSV so a half-finished promotion is
detected instead of gated against.

Reading and writing only (``load_baseline``, ``write_baseline_matrix``...) and the
environment check every gate applies before comparing with one (``check_baseline_gate``;
``check_baseline`` for comparisons of timings alone).
Promoting a run (``accept``) and calibrating margins (``record``, ``calibrate``,
``lomo``) are ``harness baseline``'s (``harness.commands.baseline``).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .environment import (
    EnvCheck,
    Environment,
    check_environment,
    check_gate_environment,
    measured_settings,
)
from .schema import Key, ResultRow, SchemaError
from .store import (
    Run,
    atomic_write_text,
    parse_csv_text,
    read_json,
    read_text,
    rows_to_csv_text,
    safe_component,
    write_json,
)

BASELINE_SCHEMA_VERSION = 1


class BaselineNotFoundError(FileNotFoundError):
    """No baseline where one was asked for (one-line message)."""


def _key_text(key: Key) -> str:
    return "|".join(key)


def _key_parse(text: str, source: str) -> Key:
    parts = text.split("|")
    if len(parts) != 3 or not all(parts):
        raise SchemaError(
            f"{source}: field 'noise_margins' has a bad key {text!r} (want case|path|mode)")
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
            "noise_margins": {_key_text(k): float(v)
                              for k, v in sorted(self.noise_margins.items())},
            "settings": dict(self.settings), "source": self.source, "accepted": self.accepted,
            "calibration": dict(self.calibration),
        }

    @classmethod
    def from_dict(cls, d: object, source: str) -> BaselineMeta:
        if not isinstance(d, dict):
            raise SchemaError(f"{source}: top level must be a JSON object")
        version = d.get("schema_version")
        if version != BASELINE_SCHEMA_VERSION or isinstance(version, bool):
            raise SchemaError(f"{source}: field 'schema_version' is {version!r}, "
                              f"expected {BASELINE_SCHEMA_VERSION}")
        for name in ("matrix", "arch", "rows_sha256"):
            if not isinstance(d.get(name), str) or not d.get(name):
                raise SchemaError(f"{source}: field {name!r} is missing or not a string")
        margins_raw = d.get("noise_margins", {})
        if not isinstance(margins_raw, dict):
            raise SchemaError(f"{source}: field 'noise_margins' must be an object")
        margins = {}
        for k, v in margins_raw.items():
            if (isinstance(v, bool) or not isinstance(v, (int, float))
                    or not math.isfinite(v) or v < 0):
                raise SchemaError(f"{source}: field 'noise_margins.{k}' is not a non-negative "
                                  f"number ({v!r})")
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
        """``baseline <commit>``; a baseline whose rows come from several commits (a
        filtered re-baseline, ``harness baseline accept --only-faster``) names each with its
        row count, most rows first, so no report credits one commit with every row."""
        counts = Counter(r.commit[:12] for r in self.rows if r.commit.strip("0"))
        if len(counts) > 1:
            return "baseline " + " + ".join(f"{c} ({n} rows)" for c, n in counts.most_common())
        env = self.environment
        return f"baseline {env.commit[:12]}" if env.commit else f"baseline {self.directory}"


def run_settings(run: Run, matrix: str | None = None) -> dict:
    """The settings ``matrix`` of ``run`` was measured with (``measured_settings`` of its json:
    settings, timing modes, CPU threads); the first matrix's when None; {} without a json."""
    metas = run.metas
    meta = metas.get(matrix) if matrix is not None else next(iter(metas.values()), None)
    return measured_settings(meta.settings, meta.extra) if meta is not None else {}


def baseline_settings(meta: BaselineMeta) -> dict:
    """A baseline matrix's settings as the policy compares them: ``measured_settings`` of
    its stored settings (which hold its timing modes), so a key added after it was recorded
    counts with its old value (``STORED_DEFAULTS``: a baseline without ``cold_min_samples``
    sampled cold rows with ``min_samples``) and a mode it lacks drops that mode's settings."""
    modes = meta.settings.get("modes")
    return measured_settings(meta.settings, {"modes": modes} if modes else None)


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
        for w in check_environment(meta.environment, env, baseline_settings(meta), cur,
                                   strict=strict, what=what):
            if w not in warnings:
                warnings.append(w)
    return warnings


def check_baseline_gate(
    base: Baseline, env: Environment, settings_of: Callable[[str], Mapping] | Mapping | None = None,
    *, strict: bool = False, what: str = "baseline",
) -> EnvCheck:
    """``check_gate_environment`` of ``env`` against every matrix of ``base`` (for a gate: a
    baseline from another GPU model of the arch is judged on accuracy, not on timing); the
    warnings once each, the first matrix's timing reason."""
    warnings: list[str] = []
    timing: str | None = None
    for name, meta in base.metas.items():
        cur = settings_of(name) if callable(settings_of) else settings_of
        check = check_gate_environment(meta.environment, env, baseline_settings(meta), cur,
                                       strict=strict, what=what)
        warnings += [w for w in check.warnings if w not in warnings]
        timing = timing or check.timing_reason
    return EnvCheck(tuple(warnings), timing)


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
                          "(edited by hand or an interrupted accept); "
                          "run `harness baseline accept` again")
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
