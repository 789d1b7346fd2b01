"""A planter for the gate study (``harness.studies.gate_study --planter``): ``plant(path)``
plants the 5% slowdown on ``path`` in ``PATHS`` for a with-block and yields the planted
``SlowdownPath`` (its ``plans_by_shape`` say what slowdown it really planted)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the ``planted`` package

from planted import defects  # noqa: E402


def plant(path: str):
    return defects.get("slowdown_5pct").plant(path=path)
