"""Measure: the engine only. Timers (``timers``, ``timing``: cold = eager batches between
CUDA events, graph = CUDA-graph replays, cpu), operand rotation beyond L2 (``rotation``),
the measured ceilings and the roofline (``ceilings``, ``roofline``), accuracy in ULPs
(``accuracy``, ``reruns``), the escape checks on a path's work (``escape``), the
environment of a run (``envinfo``), one (case, path) set up for timing (``single``), the
runner that turns cases x paths into result rows (``runner``) and the session that
measures whole matrices into ``harness.results`` (``session``).

Never imports reports, studies, the model or the commands: gating, rendering and the
command line live above it.
"""
