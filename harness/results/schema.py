"""Result-row schema: one row per (case, path, mode). Torch-free.

A ``ResultRow`` is frozen and versioned (``RESULT_SCHEMA_VERSION``). Every CSV the
harness writes has a header row with exactly ``column_names()`` (plus, for reports,
extra verdict/delta columns). ``samples_us`` holds the kept raw timing samples,
';'-joined, so the gate can test distributions rather than medians.

Versions: 2 added the run-to-run determinism columns (``accuracy_runs``,
``distinct_outputs``, ``worst_*``, ``nondeterminism_note``); 3 added the scale-aware ULP
columns ``rms_ulp_p99`` and ``rms_ulp_max`` (``harness.measure.accuracy``); 4 added
``dispatch_marlin`` (whether the path the dispatcher chose runs Marlin, recorded from that
path's ``GemmPath.is_marlin``); 5 added ``gpu_index`` and ``gpu_uuid``, the device that
measured the row (``harness bench --gpus`` spreads a matrix over several). Rows of older
versions still read: the columns added since take the values in ``ADDED_IN_2`` to
``ADDED_IN_5`` (``accuracy_runs`` 0 = not measured, the rms ULPs NaN = not measured, which
the gate does not compare, ``dispatch_marlin`` empty = not recorded, where the gate falls
back to the path name, ``gpu_index`` -1 and ``gpu_uuid`` empty = not recorded) and the row
is upgraded to the current version in memory.

Status values: ``ok`` (timed and checked), ``error`` (the path raised or returned a
non-zero code; ``error`` says why), ``unavailable`` (the path cannot run here;
``error`` holds its reason), ``rejected`` (a timing below the physical floor: a
measurement error, never a record).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

RESULT_SCHEMA_VERSION = 5
#: columns added in schema 2, with the value a version-1 row reads as
ADDED_IN_2: dict[str, object] = {
    "accuracy_runs": 0, "distinct_outputs": 0, "worst_rel_err": math.nan,
    "worst_rel_fro_err": math.nan, "worst_max_ulp": math.nan, "nondeterminism_note": "",
}
#: columns added in schema 3, with the value a version-1 or -2 row reads as
ADDED_IN_3: dict[str, object] = {"rms_ulp_p99": math.nan, "rms_ulp_max": math.nan}
#: columns added in schema 4, with the value a version-1 to -3 row reads as
ADDED_IN_4: dict[str, object] = {"dispatch_marlin": None}
#: columns added in schema 5, with the value a version-1 to -4 row reads as
ADDED_IN_5: dict[str, object] = {"gpu_index": -1, "gpu_uuid": ""}
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5)
STATUSES = ("ok", "error", "unavailable", "rejected")
MODES = ("cold", "graph", "cpu", "model")
#: A row's identity across runs: (case_id, path, mode).
Key = tuple[str, str, str]


class SchemaError(ValueError):
    """A result/baseline file or row that does not match the schema (one-line message)."""


@dataclass(frozen=True)
class ResultRow:
    # identity
    matrix: str
    case_id: str
    path: str
    mode: str
    M: int
    N: int
    K: int
    group_size: int
    seed: int = 0
    kind: str = "gemm"
    tags: str = ""
    role: str = "path"
    implementation: str = ""
    arch: str = ""
    device_name: str = ""
    # the device that measured the row: host CUDA index (-1: a CPU run, or not recorded)
    # and uuid; a CPU worker of a sharded run is a stand-in device, uuid "cpu:<index>"
    gpu_index: int = -1
    gpu_uuid: str = ""
    commit: str = ""
    status: str = "ok"
    error: str = ""
    # dispatcher model: what TinyLoop's quant_gemm would run for this case, and why
    dispatch_path: str = ""
    # dispatch_path runs Marlin; None: not recorded (schema 1-3)
    dispatch_marlin: bool | None = None
    fallback_reason: str = ""
    # timing (microseconds, device-side)
    time_us_median: float = math.nan
    time_us_iqr: float = math.nan
    time_us_ci_lo: float = math.nan
    time_us_ci_hi: float = math.nan
    n_samples: int = 0
    samples_us: str = ""
    clock_start_mhz: float = math.nan
    clock_end_mhz: float = math.nan
    clock_dropped: bool = False
    # throughput and roofline
    tflops: float = math.nan
    gbps: float = math.nan
    bytes_moved: int = 0
    roofline_floor_us: float = math.nan
    pct_roofline: float = math.nan
    # accuracy against fp64 on the dequantized weights
    rel_err: float = math.nan
    rel_fro_err: float = math.nan
    max_ulp: float = math.nan
    p99_ulp: float = math.nan
    mean_ulp: float = math.nan
    frac_ulp_over_budget: float = math.nan
    nonfinite: int = 0
    # scale-aware ULPs: |out - ref| in ULPs at the RMS of the reference row (the gate's
    # headline ULP figure; max_ulp/p99_ulp/mean_ulp above are per-element detail)
    rms_ulp_p99: float = math.nan        # NaN: not measured (schema 1-2 rows)
    rms_ulp_max: float = math.nan
    rel_err_bound: float = math.nan      # the bound this row is held to (GemmPath.error_bound)
    rel_err_bound_reason: str = ""       # why it differs from the fp16 gate ("" when it does not)
    # run-to-run determinism: the accuracy above is that of the most frequent output of
    # ``accuracy_runs`` runs on identical inputs; ``worst_*`` is the worst run's
    accuracy_runs: int = 0               # 0: not measured (schema-1 rows)
    distinct_outputs: int = 0            # bitwise-distinct outputs among those runs
    worst_rel_err: float = math.nan
    worst_rel_fro_err: float = math.nan
    worst_max_ulp: float = math.nan
    nondeterminism_note: str = ""        # the path's documented reason to vary ("" = must not)
    # Marlin + correction breakdown
    marlin_only_us: float = math.nan
    correction_overhead_pct: float = math.nan
    # load-time cost
    prepare_seconds: float = math.nan
    extra_bytes: int = 0
    # perplexity rows (kind == "ppl")
    ppl: float = math.nan
    ppl_drift_vs_native: float = math.nan
    ppl_drift_vs_reference: float = math.nan
    schema_version: int = RESULT_SCHEMA_VERSION

    @property
    def key(self) -> Key:
        """The row's identity across runs: (case_id, path, mode)."""
        return (self.case_id, self.path, self.mode)

    def samples(self) -> list[float]:
        return [float(s) for s in self.samples_us.split(";") if s]

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict, source: str = "<row>") -> ResultRow:
        """Parse a CSV/JSON dict, converting types; a bad field raises one-line SchemaError."""
        version = d.get("schema_version")
        try:
            version = int(float(version))
        except (TypeError, ValueError):
            raise SchemaError(f"{source}: field 'schema_version' is missing or not a number "
                              f"({version!r})") from None
        if version not in SUPPORTED_VERSIONS:
            raise SchemaError(
                f"{source}: schema_version {version} is not supported (expected one of "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))})"
            )
        if version == 1:
            d = {**ADDED_IN_2, **d}
        if version <= 2:
            d = {**ADDED_IN_3, **d}
        if version <= 3:
            d = {**ADDED_IN_4, **d}
        if version <= 4:
            d = {**ADDED_IN_5, **d, "schema_version": RESULT_SCHEMA_VERSION}
        kwargs = {}
        for f in fields(cls):
            if f.name not in d:
                raise SchemaError(f"{source}: missing column {f.name!r}")
            kwargs[f.name] = _convert(d[f.name], f.type, f.name, source)
        row = cls(**kwargs)
        if row.status not in STATUSES:
            raise SchemaError(f"{source}: field 'status' is {row.status!r}, "
                              f"not one of {', '.join(STATUSES)}")
        if row.mode not in MODES:
            raise SchemaError(
                f"{source}: field 'mode' is {row.mode!r}, not one of {', '.join(MODES)}")
        return row


def _convert(value, type_name, field_name: str, source: str):
    t = type_name if isinstance(type_name, str) else type_name.__name__
    if value is None or (isinstance(value, float) and math.isnan(value) and t != "float"):
        value = ""
    try:
        if t == "bool | None":                # tri-state: "" = not recorded
            if isinstance(value, bool):
                return value
            s = str(value).strip().lower()
            if s == "":
                return None
            return _convert(s, "bool", field_name, source)
        if t == "float":
            return math.nan if value in ("", None) else float(value)
        if t == "int":
            return 0 if value in ("", None) else int(float(value))
        if t == "bool":
            if isinstance(value, bool):
                return value
            s = str(value).strip().lower()
            if s in ("true", "1"):
                return True
            if s in ("false", "0", ""):
                return False
            raise ValueError(value)
        return "" if value is None else str(value)
    except (TypeError, ValueError):
        raise SchemaError(f"{source}: field {field_name!r} has a non-{t} value {value!r}") from None


def column_names() -> list[str]:
    return [f.name for f in fields(ResultRow)]


def required_columns() -> list[str]:
    """Columns every result CSV must have (older files lack the ``ADDED_IN_*`` ones; a row
    of a version that has them must carry them, which ``ResultRow.from_dict`` checks)."""
    added = {**ADDED_IN_2, **ADDED_IN_3, **ADDED_IN_4, **ADDED_IN_5}
    return [c for c in column_names() if c not in added]
