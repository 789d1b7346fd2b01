"""Shared by every test folder: ``tests/`` on ``sys.path``, so the test doubles import as
``planted`` (``from planted import defects``) and never from the product; and one disk
cache of case data for the whole test session (``HARNESS_DATA_CACHE``, inherited by the
xdist workers and every bench subprocess), removed at the end, so no test reads or fills
the user's own cache; and the switches that select what the product does (the dispatcher's,
the Marlin provider, the correction variant, the planted path, the bench's overrides)
cleared from the environment, so a test sees the defaults it was written against and sets
what it needs itself (``monkeypatch.setenv``). The device scripts export the dispatcher
switches for the bench; before this, ``nox -s tests-gpu`` run under them failed tests
that expect the defaults (the header line lists what was cleared)."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

_made: list[str] = []
#: Environment variables that change what the product does; cleared for the test session.
PRODUCT_SWITCHES = (
    "TINYLOOP_USE_MARLIN", "HARNESS_MARLIN_SM90", "HARNESS_MARLIN_PROVIDER",
    "HARNESS_CORRECTION_VARIANT", "HARNESS_PLANT_PATH", "HARNESS_CI", "HARNESS_COMMIT",
    "HARNESS_BENCH_SECONDS", "HARNESS_BENCH_PATHS", "HARNESS_BENCH_MODES",
    "HARNESS_BENCH_MATRIX", "HARNESS_BENCH_FILTER", "HARNESS_BENCH_CPU", "HARNESS_BENCH_ROWS",
)
_cleared: dict[str, str] = {}


def pytest_configure(config):
    for name in PRODUCT_SWITCHES:
        if name in os.environ:
            _cleared[name] = os.environ.pop(name)
    if "HARNESS_DATA_CACHE" not in os.environ:
        _made.append(tempfile.mkdtemp(prefix="harness-test-data-"))
        os.environ["HARNESS_DATA_CACHE"] = _made[-1]


def pytest_unconfigure(config):
    for path in _made:          # only the process that made it (not an xdist worker)
        shutil.rmtree(path, ignore_errors=True)


def pytest_report_header(config):
    if _cleared:
        return ("cleared for the tests (product switches): "
                + ", ".join(f"{k}={v}" for k, v in sorted(_cleared.items())))
    return None
