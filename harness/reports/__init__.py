"""Reports: reading stored records. The regression gate (``gate``, ``stats``, and its
records in ``verdicts``), noise-margin calibration (``calibration``), the gate's record
kept with a run (``gate_record``), CSV / HTML / Markdown / plots (``render`` and the
modules it calls), the dispatch crossover, synthetic rows for tests, and the comparison
of two stored result sets (``comparison``).

Never imports torch, git or the measurement engine (a test and the import-linter
contracts enforce it), so reports render on any machine.
"""
