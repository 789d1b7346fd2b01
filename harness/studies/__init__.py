"""Studies: one-off investigations behind ``harness study NAME`` (``harness.commands.study``).

``gate_study`` (+ ``gate_study_report``): the gate on real GPU noise; ``planted``: the
same question offline on stored runs; ``correction_study`` (+ ``correction_bench``,
``correction_report``): the correction variants of ``marlin_asym``; ``determinism``:
run-to-run determinism per path; ``crosscheck``: event timings against torch.profiler;
``timer``: one (case, path) timed several ways; ``study_cli``: the case/path arguments and
loop several share. Each keeps a ``main(argv)``. Studies may use measure, reports,
results, kernels and cases; nothing below imports them.
"""
