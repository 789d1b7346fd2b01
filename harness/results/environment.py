"""The environment a run or a baseline was measured in, and when two are comparable.

The measurement engine fills an ``Environment`` (as a dict under ``"environment"`` in a
run's ``<matrix>.json``); baselines keep the one they were accepted from.
One policy, in two forms: ``check_gate_environment`` for the gates, which judge accuracy
and timing (``harness bench``'s and ``harness ppl``'s gate, ``harness report --baseline``,
``harness compare``), and ``check_environment`` for comparisons of timings alone
(``harness baseline accept``'s diff, ``record``, ``calibrate``, ``lomo``):

* refused (``IncompatibleBaselineError``, one line): another arch; a setting that changes
  what is measured (``MEASURED_SETTINGS``: the timing stop rule, ``accuracy_runs``, the
  timing modes and, for CPU timing, the CPU threads); a side that records no environment
  at all (re-record it);
* another GPU model of the same arch: refused by ``check_environment``; a gate compares
  (``EnvCheck.timing_reason``): timing rows TIMING_NOT_COMPARABLE (``harness job`` then
  judges them on the runner, ``reports.projection``), accuracy, NaN, dispatch and
  determinism verdicts hold; the difference leads the warnings (``strict`` refuses it);
* warned (returned lines; refused with ``strict=True``, the commands' ``--strict-env``):
  another torch, CUDA, driver or optimum-quanto version, max SM clock or power limit
  (``WARNED_FACTS``).

Facts or settings unknown on either side ("" / absent: older files) are not compared.
Gate thresholds (alpha, min_effect, tolerances, the margins floor, gate_eager_speed,
fail_on_nondeterminism, ...) only change how results are judged and are never compared.

Extension point: a new environment fact is one field here (string, "" when unknown); to
warn about a difference, add it to ``WARNED_FACTS``. A new setting that changes what is
measured goes into ``MEASURED_SETTINGS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace

from .schema import SchemaError


class IncompatibleBaselineError(ValueError):
    """A comparison between runs from environments that cannot be compared (one line)."""


@dataclass(frozen=True)
class Environment:
    """Where a run was measured. Every field is a string; "" means unknown.

    Fields: ``arch`` (e.g. ``sm90``, ``cpu``), ``gpu_name`` (``torch.cuda.get_device_name``),
    ``compute_capability`` (``"9.0"``), ``torch`` (``torch.__version__``), ``cuda``
    (``torch.version.cuda``), ``driver`` (NVIDIA driver version), ``quanto``
    (optimum-quanto version), ``python``, ``platform``, ``host``, ``commit`` (git sha of
    the harness), ``date`` (ISO 8601), and the fields documented below (GPU uuid, boot
    id, clocks, power limit). ``extra`` keeps any other key it was given.
    """

    arch: str = ""
    gpu_name: str = ""
    compute_capability: str = ""
    torch: str = ""
    cuda: str = ""
    driver: str = ""
    quanto: str = ""
    python: str = ""
    platform: str = ""
    host: str = ""
    commit: str = ""
    date: str = ""
    gpu_uuid: str = ""
    """Which physical GPU (``torch.cuda.get_device_properties(...).uuid``)."""
    boot_id: str = ""
    """Which machine and boot (``/proc/sys/kernel/random/boot_id``): two runs with the same
    boot id ran on one machine without a reboot between them."""
    sm_clock_max_mhz: str = ""
    """The GPU's maximum SM clock in MHz (NVML ``nvmlDeviceGetMaxClockInfo``)."""
    sm_clock_app_mhz: str = ""
    """The application SM clock in MHz (NVML ``nvmlDeviceGetApplicationsClock``)."""
    sm_clock_default_mhz: str = ""
    """The default application SM clock in MHz (NVML ``nvmlDeviceGetDefaultApplicationsClock``)."""
    power_limit_w: str = ""
    """The enforced power limit in watts (NVML ``nvmlDeviceGetEnforcedPowerLimit``)."""
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d.update({k: v for k, v in self.extra.items() if k not in d})
        return d

    @classmethod
    def from_dict(cls, d: Mapping | None, source: str = "<environment>") -> Environment:
        """Parse a json object; values are stringified, unknown keys go to ``extra``."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise SchemaError(
                f"{source}: field 'environment' must be an object, got {type(d).__name__}")
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: "" if d[k] is None else str(d[k]) for k in names if k in d}
        extra = {str(k): str(v) for k, v in d.items() if k not in names}
        return cls(**known, extra=extra)

    def with_fallbacks(self, arch: str = "", gpu_name: str = "", commit: str = "") -> Environment:
        """Fill empty ``arch`` / ``gpu_name`` / ``commit`` from the rows' own columns."""
        return replace(
            self,
            arch=self.arch or arch,
            gpu_name=self.gpu_name or gpu_name,
            commit=self.commit or commit,
        )

    @property
    def is_empty(self) -> bool:
        """No environment recorded at all (neither an arch nor a GPU name)."""
        return not self.arch and not self.gpu_name

    def summary(self) -> str:
        """One line for report headers."""
        clocks = ""
        if self.sm_clock_max_mhz or self.sm_clock_app_mhz:
            clocks = "SM clock " + " / ".join(
                p for p in (f"max {self.sm_clock_max_mhz} MHz" if self.sm_clock_max_mhz else "",
                            f"application {self.sm_clock_app_mhz} MHz"
                            if self.sm_clock_app_mhz else "")
                if p)
        parts = [
            self.gpu_name or "unknown device",
            self.arch,
            f"GPU {self.gpu_uuid}" if self.gpu_uuid else "",
            f"torch {self.torch}" if self.torch else "",
            f"CUDA {self.cuda}" if self.cuda else "",
            f"driver {self.driver}" if self.driver else "",
            f"quanto {self.quanto}" if self.quanto else "",
            clocks,
            f"power limit {self.power_limit_w} W" if self.power_limit_w else "",
            f"host {self.host}" if self.host else "",
            f"commit {self.commit[:12]}" if self.commit else "",
        ]
        return ", ".join(p for p in parts if p)


#: Settings that change WHAT a run measures: the timing stop rule, the accuracy repeats,
#: the graph timer's duty cycle and, from the run json's extra (``measured_settings``), for
#: CPU timing, the torch CPU threads. A difference refuses the comparison. The timing
#: modes are recorded but not compared: a mode measures the same with or without the
#: others, and a run of fewer modes is gated on the ones it has (``partial``). Every other
#: setting (gate thresholds: alpha, min_effect, tolerances, the margins floor,
#: gate_eager_speed, fail_on_nondeterminism, any *_growth / *_slack / *_tolerance key)
#: only changes how results are judged and is not compared.
MEASURED_SETTINGS: tuple[str, ...] = (
    "warmup_ms", "max_case_seconds", "target_rel_spread", "min_samples", "max_samples",
    "cold_min_samples", "accuracy_runs", "graph_idle_ratio", "cpu_threads",
)

#: Measured settings that one timing mode alone reads: not compared for a run whose
#: recorded modes leave that mode out (a CPU run is not refused for the cold sampling).
MODE_SETTINGS: dict[str, str] = {"cold_min_samples": "cold", "graph_idle_ratio": "graph"}

#: Measured settings added after files were first stored: an older file (no key) counts
#: as measured with this value, so a run that changes the setting is refused by it.
STORED_DEFAULTS: dict[str, float] = {"cold_min_samples": 0}

#: The timing modes ``harness bench`` records under ``modes`` in a run json's extra.
#: ``harness ppl`` records its scoring modes under the same key; those are not timing
#: modes and are left out.
TIMING_MODES = frozenset({"cold", "graph", "cpu"})

#: Environment facts whose difference is a warning (a refusal with ``strict``):
#: (field, label, unit).
WARNED_FACTS: tuple[tuple[str, str, str], ...] = (
    ("torch", "torch", ""), ("cuda", "CUDA", ""), ("driver", "driver", ""),
    ("quanto", "optimum-quanto", ""), ("sm_clock_max_mhz", "max SM clock", " MHz"),
    ("power_limit_w", "power limit", " W"),
)

#: The help text of the commands' ``--strict-env`` flag.
STRICT_ENV_HELP = ("refuse (exit 2) instead of only warning when the two sides differ in "
                   "GPU model (of one arch: by default its timing rows are not compared), "
                   "torch, CUDA, driver or optimum-quanto version, max SM clock or power limit")

#: How environment warnings start among a ``GateResult``'s notes and on the terminal;
#: the reports show those notes in their header.
ENV_NOTE_PREFIX = "environment warning: "


def _norm(name: str) -> str:
    return " ".join(name.split()).lower()


def _value(v: object) -> object:
    """A setting or fact, normalised for comparison (numbers as floats, lists as sorted tuples)."""
    if isinstance(v, (list, tuple, set, frozenset)):
        return tuple(sorted(str(x).strip() for x in v))
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(v).strip()


def _show(v: object) -> str:
    if isinstance(v, (list, tuple, set, frozenset)):
        return ",".join(str(x) for x in v) or "(none)"
    return str(v)


def _known(v: object) -> bool:
    return v is not None and not (isinstance(v, str) and not v.strip())


def measured_settings(settings: Mapping | None, extra: Mapping | None = None) -> dict:
    """A run's (or a baseline's) settings plus what its json's extra (``modes``,
    ``cpu_threads``) says was measured: timing modes are added, the CPU threads when one is
    ``cpu``, and a ``MODE_SETTINGS`` entry is dropped when the recorded modes (timing modes
    or ``harness ppl``'s scoring modes, which read neither timer) leave its mode out."""
    out = dict(settings or {})
    if out:                       # a settings record: an older one measured with the defaults
        for key, value in STORED_DEFAULTS.items():
            out.setdefault(key, value)
    extra = extra or {}
    modes = extra.get("modes")
    if not (isinstance(modes, (list, tuple)) and modes):
        return out
    names = sorted(str(m) for m in modes)
    if all(m in TIMING_MODES for m in names):
        out["modes"] = names
        if "cpu" in names and _known(extra.get("cpu_threads")):
            out["cpu_threads"] = extra["cpu_threads"]
    for key, mode in MODE_SETTINGS.items():
        if mode not in names:
            out.pop(key, None)
    return out


def timing_problem(base_env: Environment, cur_env: Environment, *, what: str = "baseline",
                   current: str = "this run") -> str | None:
    """Why the two sides' timings cannot be compared though the runs can (another GPU model
    of the same arch), or None. CPU runs on other processors are not concerned: their
    timings are information anyway."""
    on_cpu = "cpu" in (base_env.arch, cur_env.arch)   # CPU runs gate accuracy, not speed
    if (base_env.gpu_name and cur_env.gpu_name and not on_cpu
            and _norm(base_env.gpu_name) != _norm(cur_env.gpu_name)):
        return (f"GPU model differs: {what} {base_env.gpu_name!r}, "
                f"{current} {cur_env.gpu_name!r}")
    return None


#: The dispatcher model's switches as the environment records them (``envinfo``: the
#: variable's value, "" when unset); a record without the key (older runs) is not compared.
DISPATCH_SWITCHES = ("tinyloop_use_marlin", "harness_marlin_sm90", "harness_marlin_provider",
                     "harness_dispatch_policy")


def environment_problems(
    base_env: Environment, cur_env: Environment, base_settings: Mapping | None = None,
    cur_settings: Mapping | None = None, *, what: str = "baseline", current: str = "this run",
    gpu_model_refuses: bool = True,
) -> tuple[str | None, list[str]]:
    """(why the comparison is refused or None, the warnings); see ``check_environment``.
    ``gpu_model_refuses=False``: another GPU model is not a refusal (``timing_problem``
    says it; ``check_gate_environment``)."""
    if base_env.is_empty:
        return (f"the {what} records no environment metadata (no arch, no GPU name); "
                "re-record it", [])
    if cur_env.is_empty:
        return (f"{current} records no environment metadata (no arch, no GPU name); "
                "re-record it", [])
    if base_env.arch and cur_env.arch and base_env.arch != cur_env.arch:
        return f"arch differs: {what} {base_env.arch}, {current} {cur_env.arch}", []
    model = timing_problem(base_env, cur_env, what=what, current=current)
    if model and gpu_model_refuses:
        return model, []
    base_settings, cur_settings = base_settings or {}, cur_settings or {}
    for key in MEASURED_SETTINGS:
        b, c = base_settings.get(key), cur_settings.get(key)
        if _known(b) and _known(c) and _value(b) != _value(c):
            return (f"setting {key} differs: {what} {_show(b)}, {current} {_show(c)} (it changes "
                    "what is measured; measure both with the same settings)", [])
    for key in DISPATCH_SWITCHES:
        b, c = base_env.extra.get(key), cur_env.extra.get(key)
        if b is not None and c is not None and b.strip() != c.strip():
            return (f"dispatcher switch {key.upper()} differs: {what} {b.strip() or 'unset'}, "
                    f"{current} {c.strip() or 'unset'} (it changes the dispatch column, the "
                    "dispatch rows and what LOST_DISPATCH can see; `nox -s bench-smXX` sets "
                    "TINYLOOP_USE_MARLIN=1 and HARNESS_MARLIN_SM90=1)", [])
    warnings = []
    for name, label, unit in WARNED_FACTS:
        b, c = getattr(base_env, name).strip(), getattr(cur_env, name).strip()
        if b and c and _value(b) != _value(c):
            warnings.append(f"{label} differs: {what} {b}{unit}, {current} {c}{unit}")
    return None, warnings


def check_environment(
    base_env: Environment, cur_env: Environment, base_settings: Mapping | None = None,
    cur_settings: Mapping | None = None, *, strict: bool = False, what: str = "baseline",
    current: str = "this run",
) -> list[str]:
    """Apply the environment policy to a comparison of timings alone (A/A calibration, a
    baseline's diff); return its warnings (one line each). Gates use
    ``check_gate_environment``, which lets another GPU model through for accuracy.

    Raises ``IncompatibleBaselineError`` (one line naming the field and both values) for
    another arch, another GPU model, a differing setting of ``MEASURED_SETTINGS`` or a
    side without any environment metadata; with ``strict`` also for any warning. Warnings:
    another torch, CUDA, driver or optimum-quanto version, max SM clock or power limit.
    ``base_settings`` / ``cur_settings`` are settings dicts (``measured_settings`` adds
    the run json's modes and CPU threads); a key absent on either side is not compared,
    nor is a fact that is "" on either side. Other hosts, GPUs (uuid) or boots of the
    same model are allowed: they are recorded, not compared.
    """
    reason, warnings = environment_problems(base_env, cur_env, base_settings, cur_settings,
                                            what=what, current=current)
    if reason:
        raise IncompatibleBaselineError(f"refusing to compare against this {what}: {reason}")
    if strict and warnings:
        raise IncompatibleBaselineError(f"refusing to compare against this {what} (--strict-env): "
                                        + "; ".join(warnings))
    return warnings


#: What a gate does when the GPU models differ (appended to ``timing_problem``'s warning).
TIMING_CONSEQUENCE = ("; timings are not compared with the stored rows (TIMING_NOT_COMPARABLE "
                      "unless `harness job` judges them on this runner against the baseline's "
                      "commit), accuracy, NaN, dispatch and determinism verdicts hold")


@dataclass(frozen=True)
class EnvCheck:
    """What the policy allows a gate: its warnings (one line each, for the terminal and the
    report header) and whether timing verdicts may be called (``timing_reason`` None)."""

    warnings: tuple[str, ...] = ()
    timing_reason: str | None = None

    @property
    def timing_comparable(self) -> bool:
        return self.timing_reason is None


def check_gate_environment(
    base_env: Environment, cur_env: Environment, base_settings: Mapping | None = None,
    cur_settings: Mapping | None = None, *, strict: bool = False, what: str = "baseline",
    current: str = "this run",
) -> EnvCheck:
    """The policy for a gate, which judges accuracy and timing (see the module docstring).

    As ``check_environment``, except that another GPU model of the same arch is allowed:
    the result's ``timing_reason`` says why timing verdicts cannot be called (pass it to
    ``reports.gate.evaluate``) and its first warning says so; ``strict`` refuses it like
    any warning. Another arch, a differing measured setting or a side without metadata
    raise ``IncompatibleBaselineError``.
    """
    reason, warnings = environment_problems(base_env, cur_env, base_settings, cur_settings,
                                            what=what, current=current, gpu_model_refuses=False)
    if reason:
        raise IncompatibleBaselineError(f"refusing to compare against this {what}: {reason}")
    timing = timing_problem(base_env, cur_env, what=what, current=current)
    if timing:
        if strict:
            warnings = [timing, *warnings]
        else:
            warnings = [timing + TIMING_CONSEQUENCE, *warnings]
    if strict and warnings:
        raise IncompatibleBaselineError(f"refusing to compare against this {what} (--strict-env): "
                                        + "; ".join(warnings))
    return EnvCheck(tuple(warnings), timing)


def incompatibility(baseline: Environment, current: Environment) -> str | None:
    """Why ``check_environment`` refuses these two environments (settings not compared),
    or None. Kept for callers of the older API; the policy is ``check_environment``'s."""
    return environment_problems(baseline, current)[0]


def check_compatible(baseline: Environment, current: Environment, what: str = "baseline", *,
                     strict: bool = False) -> list[str]:
    """``check_environment`` without settings (older API); returns the warnings."""
    return check_environment(baseline, current, strict=strict, what=what)


def env_notes(warnings: Iterable[str]) -> tuple[str, ...]:
    """Warnings as ``GateResult`` notes (``ENV_NOTE_PREFIX`` + the warning)."""
    return tuple(ENV_NOTE_PREFIX + w for w in warnings)


def is_env_note(note: str) -> bool:
    return note.startswith(ENV_NOTE_PREFIX)


def with_env_warnings(result, warnings: Iterable[str]):
    """``result`` (a ``GateResult``) with the warnings first among its notes, for the report
    header; unchanged when there are none."""
    notes = env_notes(warnings)
    if not notes:
        return result
    return replace(result, notes=notes + tuple(n for n in result.notes if n not in notes))


def warning_lines(command: str, warnings: Iterable[str]) -> list[str]:
    """Terminal lines: ``<command>: environment warning: <warning>``."""
    return [f"{command}: {ENV_NOTE_PREFIX}{w}" for w in warnings]
