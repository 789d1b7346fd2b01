"""``load_all()``: import every path module so each registers itself in ``PATHS``.

Extension point: a new path module is one more entry in ``PATH_MODULES`` (registration
order is report-column order: TinyLoop's paths first, then the peers).
"""

from __future__ import annotations

import importlib

from .base import PATHS, PathRegistry

PATH_MODULES = (
    "harness.kernels.native_int4",
    "harness.kernels.fp16_cache",
    "harness.kernels.marlin_asym",
    "harness.kernels.tinygemm",
    "harness.kernels.marlin_fused_zero",
)


def load_all() -> PathRegistry:
    """Import every path module (idempotent) and return the registry."""
    for name in PATH_MODULES:
        importlib.import_module(name)
    return PATHS
