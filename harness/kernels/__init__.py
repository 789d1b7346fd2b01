"""Kernels: the path contract (``base.GemmPath``) and one module per GEMM path, Marlin as one
subpackage (``marlin``: facts, packing, providers, correction variants, the ``marlin_asym``
path, the ``marlin_fused_zero`` peer), reference math (``reference``), the dispatcher model
(``dispatch``, pure) and its executor (``quant_gemm``), the SwiGLU pair paths
(``swiglu_pair``), the project's CUDA sources (``csrc/``) and their JIT build (``build``).

``registry_load.load_all()`` is the one place that imports every built-in path module and
registers it in ``base.PATHS``. This ``__init__`` imports nothing, so a light module
(``dispatch``, ``marlin.facts``) can be imported without loading any path.
"""
