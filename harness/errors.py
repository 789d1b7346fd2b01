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
