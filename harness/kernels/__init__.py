"""Kernels: one module per GEMM path behind ``base.GemmPath``, Marlin packing, reference
math, the dispatcher model (``dispatch``), the project's CUDA sources (``csrc/``) and
their JIT build (``build``). ``load_all()`` imports every path module so each registers
itself in ``PATHS``.
"""

from .registry_load import load_all  # noqa: F401

__all__ = ["load_all"]
