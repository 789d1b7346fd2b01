"""A ``harness bench --plugin`` file: CPU timings from the deterministic fake timer
(``planted.fake_timer``): virtual time, advanced by a cost model of each call, so a
run's times depend on the code it measures only. Order among plugins does not matter
(the cost model goes under any planted wrapper). On a GPU it changes nothing but the
``cpu`` mode, which a GPU run does not use.

    harness bench --cpu --matrix smoke --plugin tests/planted/fake_timer_plugin.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the ``planted`` package

from planted import fake_timer  # noqa: E402

# an instrument, not a change: `harness job`'s A/B step gives it to both sides
HARNESS_AB_SIDES = "both"

fake_timer.install()
