"""Harness settings: the ``[tool.harness]`` table of the repository's ``pyproject.toml``.

Extension point: a new threshold is one entry in ``_DEFAULT_PRESETS["default"]`` (and the
other presets), one field on ``Settings`` and the same key in ``pyproject.toml``. A new
preset is one ``[tool.harness.presets.NAME]`` table; keys it leaves out come from the
file's ``default`` preset, then from the packaged defaults below.

Where the table is read from, first hit wins:
  1. ``load_settings(pyproject=PATH)``;
  2. the ``pyproject.toml`` next to the ``harness`` package (the repository or git
     worktree it was imported from) when it has a ``[tool.harness]`` table;
  3. the nearest ``pyproject.toml`` with a ``[tool.harness]`` table from the current
     directory upwards;
  4. the packaged defaults (an installed wheel has no pyproject); they mirror the
     repository's presets (a unit test keeps the two equal).

Torch-free, like everything ``harness.reports`` imports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

try:  # Python >= 3.11
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml  # type: ignore[no-redef]


class ConfigError(ValueError):
    """A bad preset name, setting key or value (one-line message naming it)."""


#: key -> type; the order is the order of ``Settings`` fields after ``preset``.
SETTING_TYPES: dict[str, type] = {
    "rel_err_gate": float,
    "min_effect": float,
    "alpha": float,
    "noise_margin_floor": float,
    "ppl_drift_tolerance": float,
    "warmup_ms": float,
    "max_case_seconds": float,
    "target_rel_spread": float,
    "min_samples": int,
    "max_samples": int,
    "gate_eager_speed": int,
    "accuracy_runs": int,
    "fail_on_nondeterminism": int,
    "rel_err_growth": float,
    "rms_ulp_slack": float,
    "rms_ulp_growth": float,
    "graph_idle_ratio": float,
}

#: Settings added after runs were first stored: a run's json without one was gated with
#: this value (``Settings.from_dict`` fills it in). The three accuracy-growth keys did not
#: exist then (the gate compared per-element ULPs instead); a json without them reads with
#: the default preset's values.
ADDED_LATER: dict[str, float | int] = {"accuracy_runs": 1, "fail_on_nondeterminism": 0,
                                       "rel_err_growth": 0.10, "rms_ulp_slack": 0.25,
                                       "rms_ulp_growth": 0.10, "graph_idle_ratio": 0.0}

#: Settings that no longer exist: the per-element ULP gate (``max_ulp`` / ``p99_ulp``
#: against the baseline's + max(ulp_tolerance, ulp_rel_tolerance x the baseline's)),
#: replaced by the LESS_ACCURATE rule (``rel_err_growth``, ``rms_ulp_slack``,
#: ``rms_ulp_growth``). Stored runs and older pyproject tables that carry them still load;
#: the values are ignored. ``--set`` refuses them.
RETIRED: frozenset[str] = frozenset({"ulp_tolerance", "ulp_rel_tolerance"})

_DEFAULT_PRESETS: dict[str, dict[str, float | int]] = {
    "default": {
        "rel_err_gate": 1e-3, "min_effect": 0.03, "alpha": 0.01,
        "noise_margin_floor": 0.01, "ppl_drift_tolerance": 0.01, "warmup_ms": 25.0,
        "max_case_seconds": 2.0, "target_rel_spread": 0.01, "min_samples": 30,
        "max_samples": 2000, "gate_eager_speed": 0,
        "accuracy_runs": 5, "fail_on_nondeterminism": 0,
        "rel_err_growth": 0.10, "rms_ulp_slack": 0.25, "rms_ulp_growth": 0.10,
        "graph_idle_ratio": 1.0,
    },
    "strict": {
        "rel_err_gate": 1e-3, "min_effect": 0.02, "alpha": 0.01,
        "noise_margin_floor": 0.005, "ppl_drift_tolerance": 0.005, "warmup_ms": 50.0,
        "max_case_seconds": 4.0, "target_rel_spread": 0.005, "min_samples": 50,
        "max_samples": 5000, "gate_eager_speed": 1,
        "accuracy_runs": 10, "fail_on_nondeterminism": 1,
        "rel_err_growth": 0.05, "rms_ulp_slack": 0.1, "rms_ulp_growth": 0.05,
        "graph_idle_ratio": 1.0,
    },
    "permissive": {
        "rel_err_gate": 2e-3, "min_effect": 0.08, "alpha": 0.001,
        "noise_margin_floor": 0.03, "ppl_drift_tolerance": 0.02, "warmup_ms": 10.0,
        "max_case_seconds": 1.0, "target_rel_spread": 0.02, "min_samples": 20,
        "max_samples": 1000, "gate_eager_speed": 0,
        "accuracy_runs": 3, "fail_on_nondeterminism": 0,
        "rel_err_growth": 0.25, "rms_ulp_slack": 0.5, "rms_ulp_growth": 0.25,
        "graph_idle_ratio": 1.0,
    },
}
_DEFAULT_PRESET_NAME = "default"
PACKAGED_SOURCE = "<packaged defaults>"


@dataclass(frozen=True)
class Settings:
    """Gate and measurement thresholds of one preset (see ``pyproject.toml`` for meanings).

    ``preset`` names where they came from; ``source`` is the pyproject path (or
    ``<packaged defaults>``); ``overrides`` lists the keys changed on the command line.
    """

    preset: str
    rel_err_gate: float
    min_effect: float
    alpha: float
    noise_margin_floor: float
    ppl_drift_tolerance: float
    warmup_ms: float
    max_case_seconds: float
    target_rel_spread: float
    min_samples: int
    max_samples: int
    gate_eager_speed: int = 0
    accuracy_runs: int = 1
    fail_on_nondeterminism: int = 0
    rel_err_growth: float = 0.10       # LESS_ACCURATE: rel_err above baseline x (1 + this)
    rms_ulp_slack: float = 0.25        # LESS_ACCURATE: rms_ulp_p99 above baseline + max(this,
    rms_ulp_growth: float = 0.10       #   rms_ulp_growth x baseline)
    graph_idle_ratio: float = 0.0      # graph mode: untimed device idle after each batch, x its time
    source: str = PACKAGED_SOURCE
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key, typ in SETTING_TYPES.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"setting {key!r} must be a number, got {value!r}")
            if typ is int and float(value) != int(value):
                raise ConfigError(f"setting {key!r} must be an integer, got {value!r}")
            object.__setattr__(self, key, typ(value))
            if not math.isfinite(float(value)) or value < 0:
                raise ConfigError(f"setting {key!r} must be finite and >= 0, got {value!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"setting 'alpha' must be in (0, 1), got {self.alpha!r}")
        if self.accuracy_runs < 1:
            raise ConfigError(f"setting 'accuracy_runs' must be >= 1, got {self.accuracy_runs}")
        if self.fail_on_nondeterminism not in (0, 1):
            raise ConfigError(f"setting 'fail_on_nondeterminism' must be 0 or 1, got {self.fail_on_nondeterminism}")
        if self.min_samples < 1:
            raise ConfigError(f"setting 'min_samples' must be >= 1, got {self.min_samples}")
        if self.max_samples < self.min_samples:
            raise ConfigError(
                f"setting 'max_samples' ({self.max_samples}) is below 'min_samples' ({self.min_samples})"
            )

    def to_dict(self) -> dict:
        """The thresholds (and their provenance) as a JSON-ready dict."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["overrides"] = list(self.overrides)
        return d

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "<settings>") -> Settings:
        """Rebuild from ``to_dict`` output (e.g. a run's json); unknown keys (``RETIRED``
        ones included) are ignored, keys in ``ADDED_LATER`` may be absent."""
        d = {**ADDED_LATER, **d}
        missing = [k for k in SETTING_TYPES if k not in d]
        if missing:
            raise ConfigError(f"{source}: settings lack key {missing[0]!r}")
        kwargs = {k: d[k] for k in SETTING_TYPES}
        return cls(preset=str(d.get("preset", "?")), source=str(d.get("source", source)),
                   overrides=tuple(d.get("overrides", ())), **kwargs)


def _read_table(path: Path) -> dict | None:
    """``[tool.harness]`` of ``path`` or None when the file has none."""
    try:
        with open(path, "rb") as fh:
            data = _toml.load(fh)
    except _toml.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    table = data.get("tool", {}).get("harness")
    return table if isinstance(table, dict) else None


def find_pyproject(start: Path | None = None) -> Path | None:
    """The pyproject.toml holding ``[tool.harness]`` (search order in the module docstring)."""
    candidates = [Path(__file__).resolve().parent.parent / "pyproject.toml"]
    here = (start or Path.cwd()).resolve()
    candidates += [d / "pyproject.toml" for d in (here, *here.parents)]
    for cand in candidates:
        if cand.is_file() and _read_table(cand) is not None:
            return cand
    return None


def _presets_from(table: dict | None, source: str) -> tuple[dict[str, dict], str]:
    """Merged presets (file over packaged) and the default preset name."""
    presets = {name: dict(values) for name, values in _DEFAULT_PRESETS.items()}
    if table is None:
        return presets, _DEFAULT_PRESET_NAME
    file_presets = table.get("presets", {})
    if not isinstance(file_presets, dict):
        raise ConfigError(f"{source}: [tool.harness.presets] must be a table")
    for name, values in file_presets.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [tool.harness.presets.{name}] must be a table")
    # an older pyproject may still carry retired keys: read, ignored
    file_presets = {name: {k: v for k, v in values.items() if k not in RETIRED}
                    for name, values in file_presets.items()}
    base = dict(_DEFAULT_PRESETS[_DEFAULT_PRESET_NAME])
    base.update(file_presets.get(_DEFAULT_PRESET_NAME, {}))
    for name, values in file_presets.items():
        _check_keys(values, f"{source}: preset {name!r}")
        merged = dict(presets.get(name, base))
        merged.update(values)
        presets[name] = merged
    default = table.get("preset", _DEFAULT_PRESET_NAME)
    if default not in presets:
        raise ConfigError(
            f"{source}: tool.harness.preset = {default!r} is not a preset; valid presets: "
            + ", ".join(sorted(presets))
        )
    return presets, default


def _check_keys(values: Iterable[str], where: str) -> None:
    for key in values:
        if key in RETIRED:
            raise ConfigError(
                f"{where}: setting {key!r} is retired (the per-element ULP gate was replaced by "
                "rel_err_growth, rms_ulp_slack and rms_ulp_growth)"
            )
        if key not in SETTING_TYPES:
            raise ConfigError(
                f"{where}: unknown setting {key!r}; valid settings: " + ", ".join(SETTING_TYPES)
            )


def available_presets(pyproject: str | Path | None = None) -> list[str]:
    """Names of the presets that ``load_settings`` accepts."""
    path = Path(pyproject) if pyproject else find_pyproject()
    table = _read_table(path) if path else None
    return sorted(_presets_from(table, str(path or PACKAGED_SOURCE))[0])


def load_settings(
    preset: str | None = None,
    overrides: Mapping[str, object] | None = None,
    pyproject: str | Path | None = None,
) -> Settings:
    """The ``Settings`` of ``preset`` (None: ``tool.harness.preset``) with ``overrides`` applied.

    ``overrides`` maps setting keys to numbers or numeric strings (see ``parse_overrides``).
    An unknown preset or key raises ``ConfigError`` listing the valid ones.
    """
    if pyproject is not None:
        path: Path | None = Path(pyproject)
        if not path.is_file():
            raise ConfigError(f"pyproject {path} does not exist")
        table = _read_table(path)
    else:
        path = find_pyproject()
        table = _read_table(path) if path else None
    source = str(path) if path and table is not None else PACKAGED_SOURCE
    presets, default = _presets_from(table, source)
    name = preset or default
    if name not in presets:
        raise ConfigError(f"unknown preset {name!r}; valid presets: " + ", ".join(sorted(presets)))
    values = dict(presets[name])
    overrides = dict(overrides or {})
    _check_keys(overrides, "override")
    for key, raw in overrides.items():
        values[key] = _coerce(key, raw)
    return Settings(preset=name, source=source, overrides=tuple(sorted(overrides)), **values)


def _coerce(key: str, raw: object) -> float | int:
    typ = SETTING_TYPES[key]
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)  # type: ignore[arg-type]
        if typ is int:
            if not value.is_integer():
                raise ValueError
            return int(value)
        return value
    except (TypeError, ValueError):
        kind = "an integer" if typ is int else "a number"
        raise ConfigError(f"setting {key!r} needs {kind}, got {raw!r}") from None


def parse_overrides(items: Iterable[str] | None) -> dict[str, str]:
    """``["min_effect=0.05", ...]`` (``--set`` arguments) -> ``{"min_effect": "0.05"}``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        _check_keys([key], f"--set {item!r}")
        out[key] = value.strip()
    return out
