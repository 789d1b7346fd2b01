"""The one place that imports every built-in path module: ``load_all()`` registers them.

Extension point: a new built-in path is its module plus one entry in ``BUILTIN`` (the
order is report-column order: TinyLoop's paths first, then the peers). Path modules never
register themselves, so importing one (for a helper, a test) changes neither the
registry nor its order.

``is_marlin(name)`` answers, for the path the dispatcher named, whether it is a Marlin
path, by asking the path (``GemmPath.is_marlin``): the runner records it on every row.
"""

from __future__ import annotations

import os
import types
from importlib.metadata import entry_points

from harness.errors import HarnessError

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


#: The entry point group an installed plugin package registers its paths under, e.g. in
#: its pyproject.toml: ``[project.entry-points."int4_gemm_harness.paths"]`` /
#: ``my_kernels = "my_kernels.harness_paths:register"``. The object is a function called
#: with the registry (``register(paths)``), or a module whose import registers its paths.
ENTRY_POINT_GROUP = "int4_gemm_harness.paths"
#: Set to 1 to load no installed plugin package (a run of the built-in paths alone).
NO_PLUGINS_ENV = "HARNESS_NO_ENTRY_POINTS"
_entry_points_loaded: list[str] | None = None


class PluginError(HarnessError, ValueError):
    """A plugin (an installed package's entry point, a ``--plugin`` file) that does not load
    or does not register its paths: one line naming it and the error (exit 2)."""


def plugin_error(what: str, exc: BaseException) -> PluginError:
    """``exc`` raised while loading the plugin ``what``, as one line: its type, its message
    and, for a syntax error, the file and line."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    msg = " ".join(str(exc).split()) or "no message"
    return PluginError(f"plugin {what} failed to load: {type(exc).__name__}: {msg}{where}")


def load_all() -> PathRegistry:
    """Register every built-in path not registered yet (idempotent), then the paths of the
    installed plugin packages (``load_entry_points``, once per process), and return
    ``PATHS``."""
    for cls in BUILTIN:
        if cls.name not in PATHS:
            PATHS.register(cls())
    load_entry_points()
    return PATHS


def load_entry_points() -> list[str]:
    """Load every ``ENTRY_POINT_GROUP`` entry point of the installed packages (once per
    process; none with ``HARNESS_NO_ENTRY_POINTS=1``); returns their labels (``name =
    value (distribution)``), which the bench records in the run's json. A failure is one
    ``PluginError`` line naming the entry point."""
    global _entry_points_loaded
    if _entry_points_loaded is not None:
        return list(_entry_points_loaded)
    if os.environ.get(NO_PLUGINS_ENV, "") not in ("", "0"):
        _entry_points_loaded = []
        return []
    labels = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(getattr(ep, "dist", None), "name", "") or "?"
        label = f"{ep.name} = {ep.value} ({dist})"
        try:
            with PATHS.registering_from(f"entry point {label}"):
                obj = ep.load()
                if callable(obj) and not isinstance(obj, types.ModuleType):
                    obj(PATHS)
        except Exception as exc:   # noqa: BLE001 - whatever a plugin raises: one line, exit 2
            _entry_points_loaded = None
            raise plugin_error(f"entry point {label}", exc) from None
        labels.append(label)
    _entry_points_loaded = labels
    return list(labels)


def catalog(device) -> list[dict]:
    """Every registered path (built-ins and plugins): name, role, where it came from,
    what it is, and whether it runs on ``device`` (None, or the one-line reason)."""
    reg = load_all()
    out = []
    for name in reg.names():
        path = reg.get(name)
        out.append({"path": name, "role": path.role, "origin": reg.origin(name),
                    "description": path.description, "devices": ",".join(path.device_types),
                    "here": path.unavailable_reason(device) or "available"})
    return out


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
