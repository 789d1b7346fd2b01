"""A ``harness bench --plugin`` file: the planted 5% slowdown on one path.

The path is ``$HARNESS_PLANT_PATH`` (default ``fp16_cache``); every call of it takes 5%
(``$HARNESS_PLANT_FRACTION``, e.g. 0.03) longer (a device spin sized the way the gate's
graph rows see the call: see ``planted.sleep_sizing``; CPU: a host spin). Used to show
that the gate catches a real regression on the GPU:

    HARNESS_PLANT_PATH=fp16_cache harness bench --matrix production --mode graph \\
        --plugin tests/planted/slowdown_plugin.py

With ``$HARNESS_PLANT_LOG_DIR`` set, the process writes what it planted per shape (the
spin's cycles, the call's time, the expected and the measured slowdown) to
``plant-<pid>.json`` there when it exits: the slowdown really planted, beside the rows;
and the processes of one job (its bench, then the B side of its A/B) share their plans
through ``plans.json`` there: the first process to meet a shape sizes its spin, the others
plant it the same way, as a real regression is the same code in every process.
"""

import atexit
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the ``planted`` package

from planted import defects  # noqa: E402

_PATH = os.environ.get("HARNESS_PLANT_PATH", "fp16_cache")
_PLANT = defects.get("slowdown_5pct").plant(path=_PATH)
_WRAPPER = _PLANT.__enter__()          # stays planted for the life of the process
# sized on each M's first call, so the fraction may still change here
_WRAPPER.fraction = float(os.environ.get("HARNESS_PLANT_FRACTION", "") or _WRAPPER.fraction)
if os.environ.get("HARNESS_PLANT_LOG_DIR"):   # one plan per shape for every process of a job
    _WRAPPER.plan_file = Path(os.environ["HARNESS_PLANT_LOG_DIR"]) / "plans.json"


def _write_plans() -> None:
    folder = os.environ.get("HARNESS_PLANT_LOG_DIR")
    plans = getattr(_WRAPPER, "plans_by_shape", {})
    if not folder or not plans:
        return
    rows = [{"M": m, "N": n, "K": k, **plan}
            for (m, n, k), found in sorted(plans.items()) for plan in found]
    Path(folder).mkdir(parents=True, exist_ok=True)
    doc = {"path": _PATH, "fraction": _WRAPPER.fraction, "pid": os.getpid(), "plans": rows}
    (Path(folder) / f"plant-{os.getpid()}.json").write_text(json.dumps(doc, indent=1) + "\n")


atexit.register(_write_plans)
