"""Shared by every test folder: ``tests/`` on ``sys.path``, so the test doubles import as
``planted`` (``from planted import defects``) and never from the product; and one disk
cache of case data for the whole test session (``HARNESS_DATA_CACHE``, inherited by the
xdist workers and every bench subprocess), removed at the end, so no test reads or fills
the user's own cache."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

_made: list[str] = []


def pytest_configure(config):
    if "HARNESS_DATA_CACHE" not in os.environ:
        _made.append(tempfile.mkdtemp(prefix="harness-test-data-"))
        os.environ["HARNESS_DATA_CACHE"] = _made[-1]


def pytest_unconfigure(config):
    for path in _made:          # only the process that made it (not an xdist worker)
        shutil.rmtree(path, ignore_errors=True)
