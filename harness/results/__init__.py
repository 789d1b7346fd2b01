"""Results: the records every layer above reads or writes. Torch-free.

``schema`` (``ResultRow``, one row per case x path x mode), ``store`` (result CSV + json
files, ``load_run``), ``writer`` (``RowWriter``: rows appended and fsynced under a
directory lock), ``environment`` (where a run was measured and when two runs may be
compared) and ``baseline`` (the baseline files under ``baselines/<arch>/``). The
measurement engine writes through this package; reports, studies and commands read it.
"""
