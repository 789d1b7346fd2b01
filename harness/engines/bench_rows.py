"""A ``harness bench --plugin`` that measures only the (case, path) rows an A/B asks for.

``harness job``'s A/B re-measures a few rows (those its gate failed as SLOWER and those
its screen flagged), at two commits. A bench selects cases (``--filter``) and paths
(``--paths``), so without this plugin it measures every listed path on every selected
case: on the H200, 61 rows per bench for the 21 that an A/B of 2026-12-04 judged (a2 of
docs/measurement.md §9.5). With ``$HARNESS_BENCH_ROWS`` naming a JSON file of
``[case_id, path]`` pairs, each registered path reports itself unsupported, with one
line saying why, on every case that is not paired with it there; the runner records
those rows ``unavailable`` without preparing, timing or checking them, and generates a
case's data only when one of its paths is measured.

The runner (``bench_runner.SubprocessRunner``) writes the file and gives this plugin to
both sides of an A/B, last among the plugins, so it also restricts a path that an earlier
plugin wrapped (a planted slowdown). A SwiGLU pair's paths are derived from the
registered ones when the bench runs (``kernels.swiglu_pair.paths_for_case``): a pair path
follows its registered path, and the fused native pair path is made to follow
``native_int4`` (``follow_native``), so name a derived row by the path it comes from.

Such a bench measures time only: its rows are judged against the other side's timing,
never on accuracy (the job's accuracy verdicts are its own bench's, the baseline's
commit's were its recording's). So the plugin also turns off the runner's re-check on
fresh inputs after timing (``Runner._fresh_check``: a second fp64 reference per case),
which took 3.4 s of an 11.3-s A/B bench of 59 rows on an H100 (c1 of 2026-12-05,
docs/measurement.md §16.5); the accuracy run before timing, which the timing needs, stays.

Like ``bench_gate.py`` it is run by the bench of another revision (the baseline's
commit): it uses that revision's path registry (``harness.kernels.base.PATHS`` and the
``GemmPath.unsupported_reason`` it wraps, both as they have been since the A/B exists)
and its ``harness.measure.runner.Runner`` (a revision without ``_fresh_check`` keeps
whatever it has). Without the variable it does nothing.
"""

import importlib
import importlib.util
import json
import os
import sys

from harness.kernels.base import PATHS  # the registry of the revision this bench runs
from harness.measure import runner as _runner  # that revision's runner

#: the SwiGLU pair's derived paths, where that revision has them (since ce316cd)
_PAIRS = "harness.kernels.swiglu_pair"
_pairs = importlib.import_module(_PAIRS) if importlib.util.find_spec(_PAIRS) else None

ROWS_ENV = "HARNESS_BENCH_ROWS"
#: The reason recorded on a row left out (the row is ``unavailable`` in that bench only).
LEFT_OUT = "not among the rows this A/B re-measures ($HARNESS_BENCH_ROWS)"


def read_rows(path: str) -> dict[str, set[str]]:
    """path -> the case ids to measure it on, from a JSON list of [case_id, path] pairs;
    a malformed file exits the bench with one line naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            pairs = json.load(fh)
        if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                for p in pairs):
            raise ValueError(f"got {str(pairs)[:60]}")
        wanted: dict[str, set[str]] = {}
        for case_id, name in pairs:
            wanted.setdefault(name, set()).add(case_id)
    except (OSError, ValueError) as exc:
        sys.exit(f"harness bench: ${ROWS_ENV}={path}: not a JSON list of [case_id, path] "
                 f"pairs ({exc})")
    return wanted


def restrict(registry, wanted: dict[str, set[str]]) -> list[str]:
    """Make each path of ``registry`` unsupported on the cases ``wanted`` does not pair it
    with (a path absent from ``wanted`` on every case); returns the names restricted."""
    done = []
    for name in registry.names():
        path = registry.get(name)
        cases = frozenset(wanted.get(name, ()))
        own = path.unsupported_reason

        def unsupported_reason(case, _own=own, _cases=cases):
            return _own(case) if case.id in _cases else LEFT_OUT

        path.unsupported_reason = unsupported_reason   # this instance, this process only
        done.append(name)
    return done


def follow_native(fused_class) -> bool:
    """Make the fused native pair path (``swiglu_pair.FusedNativeSwiGLU``, derived when the
    bench runs) leave out every case its ``native`` path leaves out: a derived row is asked
    for by the registered path it comes from (``bench_runner.DERIVED_FROM``), and the class
    itself refuses no pair case, so without this every bench whose paths include
    ``native_int4`` measured the fused row of every pair case it selects (14 rows, 4.6 s
    of each 6-7 s bench of the foreign A/B on an H100, w1 of docs/measurement.md §16.16).
    Patches the class (this process only); False where there is none to patch."""
    if fused_class is None or not hasattr(fused_class, "unsupported_reason"):
        return False
    own = fused_class.unsupported_reason

    def unsupported_reason(self, case, _own=own):
        native = getattr(self, "native", None)     # the registered path it runs on
        return _own(self, case) or (native.unsupported_reason(case) if native else None)

    fused_class.unsupported_reason = unsupported_reason
    return True


def timing_only(runner_class) -> bool:
    """Turn off ``runner_class``'s fresh-input re-check (this process only); False where
    the class has none."""
    if not hasattr(runner_class, "_fresh_check"):
        return False
    runner_class._fresh_check = lambda self, *args, **kwargs: ""
    return True


_FILE = os.environ.get(ROWS_ENV, "")
if _FILE:
    restrict(PATHS, read_rows(_FILE))
    follow_native(getattr(_pairs, "FusedNativeSwiGLU", None))
    timing_only(_runner.Runner)
