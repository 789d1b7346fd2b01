"""The one place that imports every built-in path module: ``load_all()`` registers them.

Extension point: a new built-in path is its module plus one entry in ``BUILTIN`` (the
order is report-column order: TinyLoop's paths first, then the peers). Path modules never
register themselves, so importing one (for a helper, a test) changes neither the
registry nor its order.

``is_marlin(name)`` answers, for the path the dispatcher named, whether it is a Marlin
path, by asking the path (``GemmPath.is_marlin``): the runner records it on every row.
"""

from __future__ import annotations

from .base import PATHS, GemmPath, PathRegistry
from .fp16_cache import Fp16CachePath
from .marlin.asym import MarlinAsymPath
from .marlin.fused_zero import MarlinFusedZeroPath
from .native_int4 import NativeInt4Path
from .swiglu_pair import FusedNativeSwiGLU
from .tinygemm import TinygemmPath

#: The built-in paths, in registration (report-column) order.
BUILTIN: tuple[type[GemmPath], ...] = (
    NativeInt4Path,
    Fp16CachePath,
    MarlinAsymPath,
    TinygemmPath,
    MarlinFusedZeroPath,
)
#: Paths the dispatcher can name that live outside ``PATHS`` (a pair case's fused kernel).
UNREGISTERED: tuple[type[GemmPath], ...] = (FusedNativeSwiGLU,)


def load_all() -> PathRegistry:
    """Register every built-in path not registered yet (idempotent) and return ``PATHS``."""
    for cls in BUILTIN:
        if cls.name not in PATHS:
            PATHS.register(cls())
    return PATHS


def is_marlin(name: str, registry: PathRegistry | None = None) -> bool:
    """Whether the path called ``name`` runs a Marlin kernel, asked of the path: the one in
    ``registry`` (a run's own paths, wrapped or plugged in) if it has that name, else the
    built-in one. ValueError for a name no path has."""
    if registry is not None and name in registry:
        return bool(registry.get(name).is_marlin)
    reg = load_all()
    if name in reg:
        return bool(reg.get(name).is_marlin)
    for cls in UNREGISTERED:
        if cls.name == name:
            return bool(cls.is_marlin)
    raise ValueError(f"unknown path {name!r}: no registered or built-in path has that name")
