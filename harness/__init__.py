"""INT4 GEMM benchmarking and validation harness.

Data flows one way: ``harness.cases`` (what to compute) -> ``harness.kernels`` (how each
path computes it) -> ``harness.measure`` (timing and accuracy) -> ``harness.reports``
(records, baselines, gate, CSV/HTML/Markdown). See ``../shared/DESIGN.md``.
"""

__version__ = "0.1.0"
