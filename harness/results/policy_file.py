"""A dispatch policy: which INT4 path a runtime should dispatch, per shape class, on one GPU
model of one arch, as measured (``harness policy``; built by ``reports.policy``).

``policy/<arch>.json`` holds a ``Policy``: the arch, the GPU model(s) it was measured on,
the mode (graph: what a runtime replays), the M buckets (the distinct M of the data: a
class holds the M values above the previous bucket's edge up to its own; an M beyond the
largest edge falls in the last bucket), and per class (kind, N, K, group, M bucket) the
decision:

* ``winner``: ``path`` is the fastest correct path (``role == "path"``, rel_err within the
  gate), ahead of ``runner_up`` by ``lead`` (runner-up median / winner median - 1) with
  its bootstrap interval [``lead_lo``, ``lead_hi``] outside the noise;
* ``tie``: the lead is inside the noise (its interval reaches 0, or it is under the
  ``policy_min_lead`` setting); ``path`` is the faster median, either would do;
* ``disagree``: the runs merged into the policy named different winners, each outside its
  noise (``per_run`` says which); ``path`` is empty and a runtime keeps its own rules;
* ``none``: no path was correct.

A record, versioned and frozen; torch-free (the dispatcher model, ``kernels.dispatch``,
reads it to dispatch by policy). Extension point: a field is one attribute here, written
and read by ``to_dict`` / ``from_dict``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .schema import SchemaError
from .store import atomic_write_text

POLICY_SCHEMA_VERSION = 1
DECISIONS = ("winner", "tie", "disagree", "none")


class PolicyError(ValueError):
    """A policy file that cannot be used here (another arch or GPU model, malformed)."""


def group_label(group_size: int, K: int) -> str:
    """``gK`` for per-column (one group of K rows), else ``g<group_size>``."""
    return "gK" if group_size == K else f"g{group_size}"


@dataclass(frozen=True)
class PolicyClass:
    """One shape class's decision (see the module docstring)."""

    kind: str
    N: int
    K: int
    group: str
    M: int                       # the bucket's upper edge
    decision: str
    path: str = ""
    runner_up: str = ""
    lead: float = math.nan
    lead_lo: float = math.nan
    lead_hi: float = math.nan
    times_us: Mapping[str, float] = field(default_factory=dict)
    dispatcher: str = ""         # what the dispatcher model's rules chose for the class
    per_run: tuple[Mapping, ...] = ()

    @property
    def label(self) -> str:
        prefix = "" if self.kind == "gemm" else f"{self.kind} "
        return f"{prefix}N={self.N} K={self.K} {self.group} M<={self.M}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "N": self.N, "K": self.K, "group": self.group, "M": self.M,
                "decision": self.decision, "path": self.path, "runner_up": self.runner_up,
                "lead": _num(self.lead), "lead_lo": _num(self.lead_lo),
                "lead_hi": _num(self.lead_hi), "times_us": dict(self.times_us),
                "dispatcher": self.dispatcher, "per_run": [dict(r) for r in self.per_run]}

    @classmethod
    def from_dict(cls, d: Mapping) -> PolicyClass:
        decision = str(d["decision"])
        if decision not in DECISIONS:
            raise ValueError(f"decision {decision!r} is not one of {', '.join(DECISIONS)}")
        return cls(str(d["kind"]), int(d["N"]), int(d["K"]), str(d["group"]), int(d["M"]),
                   decision, str(d.get("path", "")), str(d.get("runner_up", "")),
                   _float(d.get("lead")), _float(d.get("lead_lo")), _float(d.get("lead_hi")),
                   {str(k): float(v) for k, v in dict(d.get("times_us", {})).items()},
                   str(d.get("dispatcher", "")), tuple(dict(r) for r in d.get("per_run", ())))


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _float(x) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class Policy:
    """The dispatch policy of one arch (see the module docstring)."""

    arch: str
    models: tuple[str, ...]
    mode: str
    m_edges: tuple[int, ...]
    classes: tuple[PolicyClass, ...]
    sources: tuple[Mapping, ...] = ()
    settings: Mapping[str, object] = field(default_factory=dict)
    created: str = ""
    schema_version: int = POLICY_SCHEMA_VERSION

    def bucket(self, M: int) -> int:
        """The bucket edge M falls in: the first edge >= M, else the largest."""
        return next((e for e in self.m_edges if M <= e), self.m_edges[-1])

    def lookup(self, kind: str, N: int, K: int, group_size: int, M: int) -> PolicyClass | None:
        """The class of a call, or None when the policy has no class of its shape."""
        if not self.m_edges:
            return None
        key = (kind, N, K, group_label(group_size, K), self.bucket(M))
        return next((c for c in self.classes
                     if (c.kind, c.N, c.K, c.group, c.M) == key), None)

    def check_device(self, arch: str, gpu_name: str, source: str = "policy") -> None:
        """Refuse (``PolicyError``, one line) a policy of another arch or GPU model."""
        if arch != self.arch:
            raise PolicyError(f"{source}: a policy of {self.arch}, this GPU is {arch}")
        if gpu_name and self.models and not any(_same(gpu_name, m) for m in self.models):
            raise PolicyError(f"{source}: measured on {', '.join(self.models)}, this GPU is "
                              f"{gpu_name!r}; make its policy with `harness policy` from runs "
                              "of this model")

    def to_dict(self) -> dict:
        return {"schema_version": self.schema_version, "arch": self.arch,
                "models": list(self.models), "mode": self.mode, "m_edges": list(self.m_edges),
                "created": self.created, "sources": [dict(s) for s in self.sources],
                "settings": dict(self.settings),
                "classes": [c.to_dict() for c in self.classes]}

    @classmethod
    def from_dict(cls, d: object, source: str = "<policy>") -> Policy:
        if not isinstance(d, dict):
            raise SchemaError(f"{source}: top level must be a JSON object")
        if d.get("schema_version") != POLICY_SCHEMA_VERSION:
            raise SchemaError(f"{source}: field 'schema_version' is "
                              f"{d.get('schema_version')!r}, expected {POLICY_SCHEMA_VERSION}")
        try:
            return cls(str(d["arch"]), tuple(str(m) for m in d["models"]), str(d["mode"]),
                       tuple(int(e) for e in d["m_edges"]),
                       tuple(PolicyClass.from_dict(c) for c in d["classes"]),
                       tuple(dict(s) for s in d.get("sources", ())),
                       dict(d.get("settings", {})), str(d.get("created", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"{source}: malformed policy ({exc})") from None


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def write_policy(path: str | Path, policy: Policy) -> Path:
    """Write ``policy`` as JSON, atomically."""
    return atomic_write_text(Path(path), json.dumps(policy.to_dict(), indent=2) + "\n")


def read_policy(path: str | Path) -> Policy:
    """Read a policy file (one-line ``SchemaError`` / ``PolicyError`` on a bad one)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicyError(f"no policy file {path}") from None
    except ValueError as exc:
        raise SchemaError(f"{path}: malformed JSON ({exc})") from None
    return Policy.from_dict(raw, str(path))
