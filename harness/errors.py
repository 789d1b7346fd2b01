"""Errors every layer may raise and the console script prints as one line (exit 2).

Lowest layer: imports nothing of the harness. ``harness.cli.main`` (and ``harness job``
for each of its steps) turns ``EXPECTED_ERRORS`` into ``harness COMMAND: error: MESSAGE``;
anything else is a bug and keeps its traceback. Other modules define their own one-line
errors where they belong (``results.schema.SchemaError``, ``results.environment.
IncompatibleBaselineError``, ``config.ConfigError``...), as subclasses of ``ValueError``
or ``FileNotFoundError`` so the console script catches them too.
"""

from __future__ import annotations


class HarnessError(Exception):
    """An expected failure with a one-line message (bad input, refused comparison...)."""


class StoreLockedError(HarnessError, RuntimeError):
    """Another process is writing the same results or baseline directory."""


class CompareError(HarnessError, ValueError):
    """A comparison that cannot be made (bad revision, failed bench run...)."""


#: What the console script reports as one line and exit status 2.
#: ``OSError`` covers what the machine refuses (a results or build directory that cannot
#: be written, a full disk): one line naming the path; rows already written are fsynced.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    HarnessError, ValueError, KeyError, OSError,
)


def one_line(exc: BaseException) -> str:
    """The message of an expected error (a ``KeyError``'s without the quotes ``str`` adds)."""
    return str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)


#: The exit codes of the gating commands (bench, job, ppl, report, compare), for CI:
EXIT_PASS = 0            # every row judged; nothing failed
EXIT_FAIL = 1            # a failing verdict (a regression)
EXIT_ERROR = 2           # bad input, a refused comparison, a step stopped by an error
EXIT_NO_BASELINE = 3     # nothing to compare: no baseline for this arch (rows NEW, a candidate)
EXIT_WRONG_RUNNER = 4    # --ci: the visible GPU is not the arch the job is for (nothing measured)
_EXIT_RANK = (EXIT_ERROR, EXIT_FAIL, EXIT_WRONG_RUNNER, EXIT_NO_BASELINE, EXIT_PASS)


def worst_exit(codes) -> int:
    """The exit code of several steps: an error over a regression over a wrong runner over
    "no baseline" over a pass (a regression in one step is never hidden by another's
    missing baseline); an unknown code counts as an error."""
    codes = [c if c in _EXIT_RANK else EXIT_ERROR for c in codes]
    return min(codes, key=_EXIT_RANK.index) if codes else EXIT_PASS

