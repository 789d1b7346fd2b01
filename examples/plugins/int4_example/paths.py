"""The entry point: ``register(paths)`` adds this package's paths to the harness's
registry. pyproject.toml names it under ``[project.entry-points."int4_gemm_harness.paths"]``.
"""

from __future__ import annotations

from .torch_dequant import TorchDequantPath
from .triton_int4 import TritonInt4Path


def register(paths) -> None:
    """Called once per harness process with ``harness.kernels.base.PATHS``."""
    paths.register(TorchDequantPath())
    paths.register(TritonInt4Path())
