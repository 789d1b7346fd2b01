"""Harness settings: declared once here, picked and tuned in ``pyproject.toml``.

Every setting is ONE field of ``Settings``, declared with ``_setting``: its type, its value
in the default preset, a one-line doc, its range and, for a setting added after runs were
first stored, ``stored_default`` (what a stored run lacking the key was gated with).
Derived from the fields: ``SPECS``, ``SETTING_TYPES``, ``DEFAULT_PRESET``, the packaged
presets (``PRESET_OVERRIDES``: where each differs), ``to_dict`` / ``from_dict``, the checks.

Extension point: a new setting is one ``_setting`` field (plus its value in the presets of
``PRESET_OVERRIDES`` that differ) and the same key, with a comment, in ``pyproject.toml``'s
presets (tests/unit/test_config.py keeps the two equal). A new preset is one
``[tool.harness.presets.NAME]`` table. A key's value, first hit wins: the preset's table
in the file, its ``PRESET_OVERRIDES``, the file's ``default``, the packaged default. The
file, first hit wins: ``load_settings(pyproject=PATH)``, the ``pyproject.toml`` with a
``[tool.harness]`` table beside the package (its checkout), then upwards from the current
directory, else the packaged defaults. Torch-free, like all ``harness.reports`` imports."""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

try:  # Python >= 3.11
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml  # type: ignore[no-redef]


class ConfigError(ValueError):
    """A bad preset name, setting key or value (one-line message naming it)."""


PACKAGED_SOURCE, DEFAULT_PRESET_NAME = "<packaged defaults>", "default"
#: Retired settings (the per-element ULP gate, replaced by LESS_ACCURATE): stored runs and
#: older pyproject tables that carry them still load, values ignored; ``--set`` refuses them.
RETIRED: frozenset[str] = frozenset({"ulp_tolerance", "ulp_rel_tolerance"})
#: Fewest samples a side the speed test takes (``reports.stats``): fewer read no SLOWER.
MIN_TEST_SAMPLES = 5

TABLE_KEYS: tuple[str, ...] = ("preset", "presets")   #: the keys ``[tool.harness]`` may hold


def _setting(default: float, doc: str, *, low: float = 0.0, high: float = math.inf,
             open_low: bool = False, open_high: bool = False,
             stored_default: float | None = None):
    """One setting's declaration: ``default`` is its default-preset value; the value must
    lie in [low, high] (an ``open_*`` end excluded) and be finite; ``stored_default`` is
    set for a setting added after runs were first stored (see ``Settings.from_dict``)."""
    meta = {"doc": doc, "low": low, "high": high, "open_low": open_low,
            "open_high": open_high, "stored_default": stored_default}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    """Gate and measurement thresholds of one preset; each field's doc is its metadata.

    ``preset`` names where they came from; ``source`` is the pyproject path (or
    ``<packaged defaults>``); ``overrides`` lists the keys changed on the command line.
    ``Settings(preset="default")`` holds the packaged default preset.
    """

    preset: str
    rel_err_gate: float = _setting(1e-3, "mean|C-ref| / mean|ref| above this fails accuracy")
    min_effect: float = _setting(0.02, "smallest relative slowdown that can be called SLOWER")
    alpha: float = _setting(
        0.01, "Mann-Whitney significance level of a SLOWER / FASTER call",
        high=1.0, open_low=True, open_high=True)
    noise_margin_floor: float = _setting(
        0.01, "a baseline's per-case noise margin is never below this")
    ab_screen: float = _setting(
        0.02, "A/B screen: a gated row whose median moved beyond this (Mann-Whitney "
        "significant) against the stored baseline is measured A/B on this machine",
        open_low=True, high=1.0, stored_default=0.02)
    ab_path_screen: float = _setting(
        0.01, "A/B screen: every gated row of a (path, mode) whose median change is beyond "
        "this goes to A/B", open_low=True, high=1.0, stored_default=0.02)
    ab_extra_rounds: int = _setting(
        4, "A/B: more rounds of a row the first leave undecided (SAME or AMBIGUOUS, moved "
        "beyond ab_screen), judged on the standard error of the rounds' means", high=32,
        stored_default=0)
    ab_undecided_se: float = _setting(2.5, "A/B: ... and of a row whose change is within this "
                                      "many standard errors of min_effect (0: off)", high=10.0,
                                      stored_default=0.0)
    ab_line_rounds: int = _setting(0, "A/B: after those, more rounds of a row still within one "
                                   "standard error of min_effect", high=32, stored_default=0)
    ab_screen_round: int = _setting(0, "another GPU model: 1 = the A/B's round 0 is the readings "
                                    "the screen chose its rows by (biased); 0 = measured", high=1,
                                    stored_default=1)
    projection_sample: int = _setting(
        0, "another GPU model: rows per class (path, mode, M bucket) measured here at the "
        "baseline's commit for the machine factor; 0: every gated row", low=0, high=10000,
        stored_default=4)
    # the machine factor's benches only (0: the bench's own; their rows screen time only)
    projection_min_samples: int = _setting(5, "another GPU model: min_samples of those benches "
                                           "(0 or >= 5)", high=2000, stored_default=0)
    projection_warmup_ms: float = _setting(5.0, "another GPU model: warmup_ms of those benches",
                                           high=1000.0, stored_default=0.0)
    projection_accuracy_runs: int = _setting(1, "another GPU model: accuracy_runs of those "
                                             "benches", high=100, stored_default=0)
    policy_min_lead: float = _setting(0.02, "dispatch policy: a class's winner leads by this, "
                                      "its interval above 0, or it is a tie", stored_default=0.02)
    fail_on_winner_change: int = _setting(0, "1: WINNER_CHANGED fails; 0: reported", high=1,
                                          stored_default=0)
    ppl_drift_tolerance: float = _setting(0.01, "relative perplexity drift allowed against "
                                          "the baseline")
    warmup_ms: float = _setting(
        25.0, "host ms of untimed warm-up batches before each (case, path, mode) samples")
    max_case_seconds: float = _setting(
        2.0, "host seconds of sampling after which a (case, path, mode) stops (time_cap)",
        open_low=True)
    target_rel_spread: float = _setting(
        0.01, "sampling stops when the median's 95% CI half-width is below this x median",
        open_low=True)
    min_samples: int = _setting(
        30, "samples taken before the spread may stop sampling (at least 3)", low=3)
    max_samples: int = _setting(
        2000, "samples after which sampling stops (at least min_samples)", low=3)
    cold_min_samples: int = _setting(
        10, "cold mode's min_samples (>= 3; 0: min_samples): cold rows are information on a "
        "GPU, their sampling was most of the job's time (measurement 9.2)", stored_default=0)
    gate_eager_speed: int = _setting(
        0, "1: SLOWER in host-paced modes (cold, cpu, model) fails the gate; 0: reported",
        high=1)
    accuracy_runs: int = _setting(
        5, "runs of each (case, path) on identical inputs, outputs compared bit for bit",
        low=1, stored_default=1)
    fail_on_nondeterminism: int = _setting(
        0, "1: every nondeterministic row fails; 0: a path documented to vary passes",
        high=1, stored_default=0)
    rel_err_growth: float = _setting(
        0.10, "LESS_ACCURATE: rel_err above the baseline's x (1 + this)", stored_default=0.10)
    rms_ulp_slack: float = _setting(
        0.25, "LESS_ACCURATE: rms_ulp_p99 above the baseline's + max(this, growth x it)",
        stored_default=0.25)
    rms_ulp_growth: float = _setting(
        0.10, "LESS_ACCURATE: the relative part of the rms_ulp_p99 allowance", stored_default=0.10)
    graph_idle_ratio: float = _setting(1.0, "graph mode: untimed GPU idle after each timed "
                                       "batch, x the batch's time", stored_default=0.0)
    source: str = PACKAGED_SOURCE
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for spec in SPECS.values():
            object.__setattr__(self, spec.name, spec.check(getattr(self, spec.name)))
        if self.max_samples < self.min_samples:
            raise ConfigError(f"setting 'max_samples' ({self.max_samples}) is below "
                              f"'min_samples' ({self.min_samples})")
        if self.cold_min_samples and not 3 <= self.cold_min_samples <= self.max_samples:
            raise ConfigError(f"setting 'cold_min_samples' ({self.cold_min_samples}) must be 0 "
                              f"or between 3 and 'max_samples' ({self.max_samples})")
        if 0 < (n := self.projection_min_samples) < MIN_TEST_SAMPLES:
            raise ConfigError(f"setting 'projection_min_samples' must be 0 or >= "
                              f"{MIN_TEST_SAMPLES} (the screen's test's minimum), got {n}")

    def to_dict(self) -> dict:
        """The thresholds (and their provenance) as a JSON-ready dict."""
        d = asdict(self)
        d["overrides"] = list(self.overrides)
        # the file's name, not its path on this machine: runs and baselines travel
        d["source"] = self.source if self.source.startswith("<") else Path(self.source).name
        return d

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "<settings>") -> Settings:
        """Rebuild from ``to_dict`` output (e.g. a run's json). Unknown keys (``RETIRED``
        ones included) are ignored; a setting with a ``stored_default`` may be absent (the
        run was gated with that value), any other absent setting is an error."""
        missing = [s.name for s in SPECS.values() if s.name not in d and s.stored_default is None]
        if missing:
            raise ConfigError(f"{source}: settings lack key {missing[0]!r}")
        values = {s.name: d.get(s.name, s.stored_default) for s in SPECS.values()}
        try:
            return cls(preset=str(d.get("preset", "?")), source=str(d.get("source", source)),
                       overrides=tuple(d.get("overrides", ())), **values)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


@dataclass(frozen=True)
class SettingSpec:
    """One setting as ``Settings`` declares it (derived from the field)."""

    name: str
    type: type
    default: float
    doc: str
    low: float
    high: float
    open_low: bool
    open_high: bool
    stored_default: float | None

    def range_text(self) -> str:
        """E.g. ``>= 0``, ``in (0, 1)``, ``0 or 1``."""
        lo, hi = f"{self.low:g}", f"{self.high:g}"
        if self.type is int and self.high - self.low == 1:
            return f"{lo} or {hi}"
        if math.isinf(self.high):
            return f"{'>' if self.open_low else '>='} {lo}"
        return f"in {'(' if self.open_low else '['}{lo}, {hi}{')' if self.open_high else ']'}"

    def check(self, value: object) -> float | int:
        """``value`` as this setting's type; ``ConfigError`` naming the setting if it is
        not a number of that type, not finite or out of range."""
        kind = "an integer" if self.type is int else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"setting {self.name!r} must be {kind}, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"setting {self.name!r} must be finite, got {value!r}")
        if self.type is int and not float(value).is_integer():
            raise ConfigError(f"setting {self.name!r} must be {kind}, got {value!r}")
        value = self.type(value)
        below = value <= self.low if self.open_low else value < self.low
        above = value >= self.high if self.open_high else value > self.high
        if below or above:
            raise ConfigError(
                f"setting {self.name!r} must be {self.range_text()}, got {value!r}")
        return value


def _specs() -> dict[str, SettingSpec]:
    hints = typing.get_type_hints(Settings)
    return {f.name: SettingSpec(name=f.name, type=hints[f.name], default=f.default, **f.metadata)
            for f in fields(Settings) if f.metadata}


#: name -> its declaration, in ``Settings`` field order.
SPECS: dict[str, SettingSpec] = _specs()
#: name -> type (int or float).
SETTING_TYPES: dict[str, type] = {name: spec.type for name, spec in SPECS.items()}
#: The default preset: name -> value.
DEFAULT_PRESET: dict[str, float | int] = {name: spec.default for name, spec in SPECS.items()}

#: The other packaged presets: where each differs from ``DEFAULT_PRESET``.
PRESET_OVERRIDES: dict[str, dict[str, float | int]] = {
    "strict": {
        "min_effect": 0.015, "noise_margin_floor": 0.005, "ppl_drift_tolerance": 0.005,
        "warmup_ms": 50.0, "max_case_seconds": 4.0, "target_rel_spread": 0.005,
        "min_samples": 50, "max_samples": 5000, "gate_eager_speed": 1, "accuracy_runs": 10,
        "fail_on_nondeterminism": 1, "rel_err_growth": 0.05, "rms_ulp_slack": 0.1,
        "rms_ulp_growth": 0.05, "cold_min_samples": 0,
    },
    "permissive": {
        "rel_err_gate": 2e-3, "min_effect": 0.08, "alpha": 0.001, "noise_margin_floor": 0.03,
        "ppl_drift_tolerance": 0.02, "warmup_ms": 10.0, "max_case_seconds": 1.0,
        "target_rel_spread": 0.02, "min_samples": 20, "max_samples": 1000, "accuracy_runs": 3,
        "rel_err_growth": 0.25, "rms_ulp_slack": 0.5, "rms_ulp_growth": 0.25,
    },
}


def packaged_presets() -> dict[str, dict[str, float | int]]:
    """Every packaged preset in full: name -> {setting: value}."""
    out = {DEFAULT_PRESET_NAME: dict(DEFAULT_PRESET)}
    out.update({name: {**DEFAULT_PRESET, **over} for name, over in PRESET_OVERRIDES.items()})
    return out


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


def _file_presets(table: dict, source: str) -> dict[str, dict]:
    """The file's presets, keys checked, ``RETIRED`` keys dropped."""
    for key in table:
        if key not in TABLE_KEYS:
            raise ConfigError(f"{source}: unknown key {key!r} in [tool.harness]; valid keys: "
                              + ", ".join(TABLE_KEYS))
    presets = table.get("presets", {})
    if not isinstance(presets, dict):
        raise ConfigError(f"{source}: [tool.harness.presets] must be a table")
    out = {}
    for name, values in presets.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [tool.harness.presets.{name}] must be a table")
        # an older pyproject may still carry retired keys: read, ignored
        values = {k: v for k, v in values.items() if k not in RETIRED}
        _check_keys(values, f"{source}: preset {name!r}")
        out[name] = values
    return out


def _presets_from(table: dict | None, source: str) -> tuple[dict[str, dict], str]:
    """Every preset in full (values checked) and the default preset name."""
    if table is None:
        return packaged_presets(), DEFAULT_PRESET_NAME
    file_presets = _file_presets(table, source)
    file_default = file_presets.get(DEFAULT_PRESET_NAME, {})
    presets = {}
    for name in dict.fromkeys([DEFAULT_PRESET_NAME, *PRESET_OVERRIDES, *file_presets]):
        values = {**DEFAULT_PRESET, **file_default, **PRESET_OVERRIDES.get(name, {}),
                  **file_presets.get(name, {})}
        try:
            Settings(preset=name, source=source, **values)
        except ConfigError as exc:
            raise ConfigError(f"{source}: preset {name!r}: {exc}") from None
        presets[name] = values
    default = table.get("preset", DEFAULT_PRESET_NAME)
    if not isinstance(default, str) or default not in presets:
        raise ConfigError(
            f"{source}: tool.harness.preset = {default!r} is not a preset; valid presets: "
            + ", ".join(sorted(presets))
        )
    return presets, default


def _check_keys(values: Iterable[str], where: str) -> None:
    for key in values:
        if key in RETIRED:
            raise ConfigError(f"{where}: setting {key!r} is retired (the per-element ULP gate "
                              "was replaced by rel_err_growth, rms_ulp_slack and rms_ulp_growth)")
        if key not in SPECS:
            raise ConfigError(f"{where}: unknown setting {key!r}; valid settings: "
                              + ", ".join(SPECS))


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
    An unknown preset, key or a bad value raises a one-line ``ConfigError`` naming it.
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
    """A ``--set`` value (a string or a number) as the setting's type."""
    spec = SPECS[key]
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        kind = "an integer" if spec.type is int else "a number"
        raise ConfigError(f"setting {key!r} must be {kind}, got {raw!r}") from None
    return spec.check(value)


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
