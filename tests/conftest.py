"""Shared by every test folder: ``tests/`` on ``sys.path``, so the test doubles import as
``planted`` (``from planted import defects``) and never from the product."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
