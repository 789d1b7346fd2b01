"""Lets the tests import ``int4_example`` from this checkout when the package is not
installed (the harness's own `nox -s tests` runs them this way)."""

import sys
from pathlib import Path

PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
if PACKAGE_ROOT not in sys.path:
    sys.path.insert(0, PACKAGE_ROOT)
