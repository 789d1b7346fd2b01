"""Cases: the shape-matrix registry, case records, deterministic data and quantization.

``cases`` knows nothing of kernels. Public API::

    from harness.cases import GemmCase, MATRICES, case_data
    cases = MATRICES.cases("production", "M <= 64 and group_size == 128")
"""

from . import matrices as _matrices  # noqa: F401  (registers the matrices)
from .case import CASE_SCHEMA_VERSION, KINDS, GemmCase
from .filters import FilterError, apply_filter, compile_filter
from .registry import MATRICES, MatrixRegistry, UnknownMatrixError

__all__ = [
    "CASE_SCHEMA_VERSION", "KINDS", "GemmCase", "FilterError", "apply_filter",
    "compile_filter", "MATRICES", "MatrixRegistry", "UnknownMatrixError",
]
