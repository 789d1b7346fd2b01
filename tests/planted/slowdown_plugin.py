"""A ``harness bench --plugin`` file: the planted 5% slowdown on one path.

The path is ``$HARNESS_PLANT_PATH`` (default ``fp16_cache``); every call of it takes 5%
longer (a device spin sized from the path's own graph-replay time; CPU: a host spin).
Used to show that the gate catches a real regression on the GPU:

    HARNESS_PLANT_PATH=fp16_cache harness bench --matrix production --mode graph \\
        --plugin tests/planted/slowdown_plugin.py
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the ``planted`` package

from planted import defects  # noqa: E402

_PLANT = defects.get("slowdown_5pct").plant(path=os.environ.get("HARNESS_PLANT_PATH", "fp16_cache"))
_PLANT.__enter__()          # stays planted for the life of the process
