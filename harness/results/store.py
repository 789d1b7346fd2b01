"""Result files on disk: ``results/<commit>/<arch>/<matrix>.csv`` + ``<matrix>.json``.

The CSV has a header row of exactly ``schema.column_names()`` and one row per
(case, path, mode); the json (``RunMeta``) holds the environment, the ceilings used for
the roofline and the settings. Every whole-file write is atomic (a temp file in the same
directory, fsync, ``os.replace``). Appending row by row, with a lock per directory, is
``harness.results.writer.RowWriter``.

Readers validate: a missing or malformed file, a wrong ``schema_version``, a missing
column or a non-numeric value raises ``SchemaError`` with one line naming the file (and
line) and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .environment import Environment
from .schema import (
    RESULT_SCHEMA_VERSION,
    SUPPORTED_VERSIONS,
    ResultRow,
    SchemaError,
    column_names,
    required_columns,
)

META_SCHEMA_VERSION = 1
_SAFE_COMPONENT_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+")


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def safe_component(value: str, name: str) -> str:
    """``value`` if usable as one path component (letters, digits, ``._-+``); else ValueError."""
    if not value or value in (".", "..") or not set(value) <= _SAFE_COMPONENT_CHARS:
        raise ValueError(
            f"{name} {value!r} cannot be a directory name (letters, digits, ._-+ only)")
    return value


def run_dir(root: str | Path, commit: str, arch: str) -> Path:
    """``root/<commit>/<arch>``: where one run's matrices live."""
    return Path(root) / safe_component(commit, "commit") / safe_component(arch, "arch")


# ---------------------------------------------------------------- atomic writes

def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------- CSV rows

def format_value(value: object) -> str:
    """One CSV cell: NaN -> "", bools -> true/false, floats at full precision."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return "" if value is None else str(value)


def row_cells(row: ResultRow, columns: Sequence[str] | None = None) -> list[str]:
    d = row.to_dict()
    return [format_value(d[c]) for c in (columns or column_names())]


def rows_to_csv_text(rows: Iterable[ResultRow]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(column_names())
    for row in rows:
        writer.writerow(row_cells(row))
    return buf.getvalue()


def write_rows(path: str | Path, rows: Iterable[ResultRow]) -> Path:
    """Atomically (re)write a whole result CSV."""
    return atomic_write_text(path, rows_to_csv_text(rows))


def parse_csv_text(text: str, source: str) -> list[ResultRow]:
    """Validate and parse result-CSV text (``source`` names it in errors)."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise SchemaError(f"{source}: empty file (no header row)") from None
    except csv.Error as exc:
        raise SchemaError(f"{source}: not a CSV file ({exc})") from None
    header = [h.strip() for h in header]
    missing = [c for c in required_columns() if c not in header]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SchemaError(f"{source}: missing column {missing[0]!r}{more}")
    rows: list[ResultRow] = []
    seen: dict[tuple, int] = {}
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) < len(header):
                raise SchemaError(
                    f"{source}:{line}: field {header[len(cells)]!r} is missing"
                    f" ({len(cells)} fields, the header has {len(header)})"
                )
            if len(cells) > len(header):
                raise SchemaError(
                    f"{source}:{line}: {len(cells)} fields where the header has {len(header)}"
                    f" (extra value after field {header[-1]!r})"
                )
            row = ResultRow.from_dict(dict(zip(header, cells, strict=True)),
                                      source=f"{source}:{line}")
            if row.key in seen:
                raise SchemaError(
                    f"{source}:{line}: duplicate row for (case_id, path, mode) = {row.key}"
                    f" (first on line {seen[row.key]})"
                )
            seen[row.key] = line
            rows.append(row)
    except csv.Error as exc:
        raise SchemaError(f"{source}:{reader.line_num}: malformed CSV ({exc})") from None
    return rows


def read_text(path: str | Path, what: str = "file") -> str:
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise SchemaError(f"{path}: is a directory, not a {what}") from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_rows(path: str | Path) -> list[ResultRow]:
    """All rows of a result CSV, validated (``SchemaError`` naming file and field)."""
    return parse_csv_text(read_text(path, "result CSV"), str(path))


# ---------------------------------------------------------------- run metadata

@dataclass(frozen=True)
class RunMeta:
    """The ``<matrix>.json`` beside a result CSV.

    ``ceilings`` are the device ceilings the roofline used (e.g. ``copy_gbps``,
    ``fp16_tflops``: numbers); ``settings`` is ``Settings.to_dict()`` of the run;
    ``extra`` keeps any other top-level key the writer added.
    """

    matrix: str
    commit: str = ""
    arch: str = ""
    environment: Environment = field(default_factory=Environment)
    ceilings: Mapping[str, float] = field(default_factory=dict)
    settings: Mapping[str, object] = field(default_factory=dict)
    created: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)
    schema_version: int = META_SCHEMA_VERSION

    def to_dict(self) -> dict:
        d = dict(self.extra)
        d.update(
            schema_version=self.schema_version, result_schema_version=RESULT_SCHEMA_VERSION,
            matrix=self.matrix, commit=self.commit, arch=self.arch,
            created=self.created or now_iso(), environment=self.environment.to_dict(),
            ceilings=dict(self.ceilings), settings=dict(self.settings),
        )
        return d

    @classmethod
    def from_dict(cls, d: object, source: str = "<meta>") -> RunMeta:
        if not isinstance(d, dict):
            raise SchemaError(f"{source}: top level must be a JSON object")
        version = d.get("schema_version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise SchemaError(f"{source}: field 'schema_version' is missing or not an integer "
                              f"({version!r})")
        if version != META_SCHEMA_VERSION:
            raise SchemaError(f"{source}: schema_version {version} is not supported "
                              f"(expected {META_SCHEMA_VERSION})")
        rsv = d.get("result_schema_version", RESULT_SCHEMA_VERSION)
        if rsv not in SUPPORTED_VERSIONS:
            raise SchemaError(
                f"{source}: result_schema_version {rsv!r} is not supported (expected one of "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))})"
            )
        matrix = d.get("matrix")
        if not isinstance(matrix, str) or not matrix:
            raise SchemaError(f"{source}: field 'matrix' is missing or not a string ({matrix!r})")
        for name in ("commit", "arch", "created"):
            if not isinstance(d.get(name, ""), str):
                raise SchemaError(f"{source}: field {name!r} must be a string, got {d[name]!r}")
        ceilings = d.get("ceilings", {})
        if not isinstance(ceilings, dict):
            raise SchemaError(f"{source}: field 'ceilings' must be an object")
        for key, value in ceilings.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SchemaError(f"{source}: field 'ceilings.{key}' is not a number ({value!r})")
        settings = d.get("settings", {})
        if not isinstance(settings, dict):
            raise SchemaError(f"{source}: field 'settings' must be an object")
        known = {"schema_version", "result_schema_version", "matrix", "commit", "arch",
                 "created", "environment", "ceilings", "settings"}
        return cls(
            matrix=matrix, commit=d.get("commit", ""), arch=d.get("arch", ""),
            environment=Environment.from_dict(d.get("environment"), source),
            ceilings={k: float(v) for k, v in ceilings.items()}, settings=settings,
            created=d.get("created", ""), extra={k: v for k, v in d.items() if k not in known},
            schema_version=version,
        )


def write_json(path: str | Path, data: dict) -> Path:
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return atomic_write_text(path, text)


def read_json(path: str | Path, what: str = "json file") -> object:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno} "
                          f"({exc.msg})") from None


def write_meta(path: str | Path, meta: RunMeta) -> Path:
    return write_json(path, meta.to_dict())


def read_meta(path: str | Path) -> RunMeta:
    return RunMeta.from_dict(read_json(path, "run json"), str(path))


# ---------------------------------------------------------------- whole runs

@dataclass(frozen=True)
class Run:
    """One stored run: the rows of one or more matrices and their metadata."""

    source: str
    rows: tuple[ResultRow, ...]
    metas: Mapping[str, RunMeta] = field(default_factory=dict)
    csv_paths: tuple[Path, ...] = ()
    #: rows the bench's gate measured again to confirm a SLOWER or settle an AMBIGUOUS
    confirmations: tuple[ResultRow, ...] = ()

    @property
    def matrices(self) -> list[str]:
        return sorted({r.matrix for r in self.rows} | set(self.metas))

    @property
    def environment(self) -> Environment:
        """The first matrix's environment, gaps filled from the rows."""
        env = next(iter(self.metas.values())).environment if self.metas else Environment()
        first = self.rows[0] if self.rows else None
        if first is None:
            return env
        return env.with_fallbacks(arch=first.arch, gpu_name=first.device_name, commit=first.commit)

    @property
    def label(self) -> str:
        env = self.environment
        return env.commit[:12] if env.commit else Path(self.source).name


def write_run(directory: str | Path, rows: Sequence[ResultRow], meta: RunMeta) -> Path:
    """Write ``<dir>/<matrix>.csv`` then ``<matrix>.json`` (each atomic); returns the CSV path."""
    directory = Path(directory)
    csv_path = directory / f"{safe_component(meta.matrix, 'matrix')}.csv"
    write_rows(csv_path, rows)
    write_meta(csv_path.with_suffix(".json"), meta)
    return csv_path


def _is_result_csv(path: Path) -> bool:
    if path.name.startswith("."):
        return False
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return "samples_us" in header and "schema_version" in header


#: Subdirectories that hold derived files, not runs (reports, bench's candidate baseline).
_NOT_RUN_DIRS = {"report", "candidate-baseline", "confirm"}
#: Where ``harness bench`` stores the gate's confirmation re-measurements of a matrix:
#: ``<run dir>/confirm/<matrix>.csv`` (result schema; read back as ``Run.confirmations``).
CONFIRM_DIR = "confirm"


def find_result_csvs(path: str | Path) -> list[Path]:
    """The result CSVs a path names: a CSV, a json's CSV, or the one directory holding them."""
    path = Path(path)
    if path.is_file():
        return [path.with_suffix(".csv") if path.suffix == ".json" else path]
    if not path.is_dir():
        raise SchemaError(f"{path}: no such result file or directory")
    direct = sorted(p for p in path.glob("*.csv") if _is_result_csv(p))
    if direct:
        return direct
    dirs = sorted({p.parent for p in path.rglob("*.csv")
                   if not set(p.relative_to(path).parts[:-1]) & _NOT_RUN_DIRS
                   and _is_result_csv(p)})
    if not dirs:
        raise SchemaError(f"{path}: holds no result CSV "
                          "(a header with 'samples_us' and 'schema_version')")
    if len(dirs) > 1:
        names = ", ".join(str(d.relative_to(path)) for d in dirs[:6])
        raise SchemaError(f"{path}: holds results in {len(dirs)} directories ({names}); name one")
    return sorted(p for p in dirs[0].glob("*.csv") if _is_result_csv(p))


def load_run(path: str | Path) -> Run:
    """Read a stored run from a CSV, its json, or a results directory (all matrices in it)."""
    csvs = find_result_csvs(path)
    rows: list[ResultRow] = []
    metas: dict[str, RunMeta] = {}
    confirm: list[ResultRow] = []
    for csv_path in csvs:
        part = read_rows(csv_path)
        rows.extend(part)
        stored = csv_path.parent / CONFIRM_DIR / csv_path.name
        if stored.is_file():
            confirm.extend(read_rows(stored))
        json_path = csv_path.with_suffix(".json")
        if json_path.is_file():
            meta = read_meta(json_path)
            metas[meta.matrix] = meta
    return Run(source=str(path), rows=tuple(rows), metas=metas, csv_paths=tuple(csvs),
               confirmations=tuple(confirm))


def confirm_path(csv_path: str | Path) -> Path:
    """Where the confirmation rows of the result CSV ``csv_path`` are stored."""
    csv_path = Path(csv_path)
    return csv_path.parent / CONFIRM_DIR / csv_path.name
