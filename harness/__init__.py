"""INT4 GEMM benchmarking and validation harness.

Layers, top to bottom (a layer imports only those below it; ``pyproject.toml``'s
import-linter contracts enforce it)::

    harness.cli        the console script: wires the commands, one-line errors
    harness.commands   one module per command (bench, job, ppl, report, compare, ...)
    harness.studies    one-off investigations behind ``harness study NAME``
    harness.model      the looped transformer for perplexity drift
    harness.reports    reading records: the gate, CSV / HTML / Markdown (no torch)
    harness.measure    the engine: timers, accuracy, the runner, the session
    harness.kernels    one module per GEMM path, the dispatcher model, the CUDA build
    harness.results    the records: schema, store, writer, environment, baselines (no torch)
    harness.cases      the shape-matrix registry
    harness.config, harness.errors, harness.archs   (settings, errors, the known GPU archs)

Data flows one way: cases (what to compute) -> kernels (how each path computes it) ->
measure (timing and accuracy) -> results (the rows on disk) -> reports (gate, renders).
"""

__version__ = "0.1.0"
