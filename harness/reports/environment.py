"""The environment a run or a baseline was measured in, and when two are comparable.

The measurement engine fills an ``Environment`` (as a dict under ``"environment"`` in a
run's ``<matrix>.json``); baselines keep the one they were accepted from. Timings taken on
another arch, another GPU model, another torch release or another CUDA major version are
not comparable, so ``incompatibility`` names the first such difference and the gate
refuses (``IncompatibleBaselineError``).

Extension point: a new environment fact is one field here (string, "" when unknown); to
make it part of the comparability rule, add a check to ``incompatibility``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

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
    the harness), ``date`` (ISO 8601). ``extra`` keeps any other key it was given.
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
            raise SchemaError(f"{source}: field 'environment' must be an object, got {type(d).__name__}")
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: "" if d[k] is None else str(d[k]) for k in names if k in d}
        extra = {str(k): str(v) for k, v in d.items() if k not in names}
        return cls(**known, extra=extra)

    def with_fallbacks(self, arch: str = "", gpu_name: str = "", commit: str = "") -> Environment:
        """Fill empty ``arch`` / ``gpu_name`` / ``commit`` from the rows' own columns."""
        from dataclasses import replace

        return replace(
            self,
            arch=self.arch or arch,
            gpu_name=self.gpu_name or gpu_name,
            commit=self.commit or commit,
        )

    def summary(self) -> str:
        """One line for report headers."""
        parts = [
            self.gpu_name or "unknown device",
            self.arch,
            f"torch {self.torch}" if self.torch else "",
            f"CUDA {self.cuda}" if self.cuda else "",
            f"driver {self.driver}" if self.driver else "",
            f"quanto {self.quanto}" if self.quanto else "",
            f"commit {self.commit[:12]}" if self.commit else "",
        ]
        return ", ".join(p for p in parts if p)


def _release(version: str, parts: int) -> tuple[int, ...] | None:
    """Leading numeric components of a version (``2.11.0+cu130`` -> (2, 11))."""
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?", version or "")
    if not m:
        return None
    nums = tuple(int(g) for g in m.groups() if g is not None)
    return nums[:parts] if len(nums) >= parts else None


def _norm(name: str) -> str:
    return " ".join(name.split()).lower()


def incompatibility(baseline: Environment, current: Environment) -> str | None:
    """Why timings from ``current`` cannot be compared to ``baseline``; None if they can.

    Refused: a different arch; a different GPU model; a different torch release
    (major.minor: torch has been 2.x for years and each minor release changes kernels);
    a different CUDA major version. Facts unknown ("") on either side are not compared.
    """
    if baseline.arch and current.arch and baseline.arch != current.arch:
        return f"baseline arch is {baseline.arch}, this run is {current.arch}"
    if baseline.gpu_name and current.gpu_name and _norm(baseline.gpu_name) != _norm(current.gpu_name):
        return f"baseline GPU is {baseline.gpu_name!r}, this run is {current.gpu_name!r}"
    bt, ct = _release(baseline.torch, 2), _release(current.torch, 2)
    if bt and ct and bt != ct:
        return f"baseline torch is {baseline.torch}, this run has {current.torch} (release differs)"
    bc, cc = _release(baseline.cuda, 1), _release(current.cuda, 1)
    if bc and cc and bc != cc:
        return f"baseline CUDA is {baseline.cuda}, this run has {current.cuda} (major version differs)"
    return None


def check_compatible(baseline: Environment, current: Environment, what: str = "baseline") -> None:
    """Raise ``IncompatibleBaselineError`` with the reason when the two are not comparable."""
    reason = incompatibility(baseline, current)
    if reason:
        raise IncompatibleBaselineError(f"refusing to compare against this {what}: {reason}")
