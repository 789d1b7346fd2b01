"""Per-device spread of a sharded run (``harness bench --gpus``): does one GPU of the host
read slower than its siblings?

Each row of a sharded run is measured by one device (``gpu_index``, ``gpu_uuid``), so the
devices are compared through the baseline: per device, the median over its timed rows of
(run median / baseline median). A device whose median ratio is more than ``min_effect``
above the median of the other devices' is reported SLOW: a host health check (a throttled
or degraded GPU), not a verdict on the code. Torch-free, like the rest of ``reports``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..results.models import matrix_dir
from ..results.schema import ResultRow
from ..results.store import read_rows


@dataclass(frozen=True)
class DeviceSpread:
    """One device of a run: its rows compared with the baseline, and whether it is slow."""

    gpu_index: int
    gpu_uuid: str
    rows: int
    median_ratio: float          # median of run / baseline over its timed rows
    siblings_ratio: float        # the median of the other devices' median ratios (NaN: none)
    slow: bool


def device_spread(rows: list[ResultRow], baseline: list[ResultRow],
                  min_effect: float) -> list[DeviceSpread]:
    """One ``DeviceSpread`` per device that measured a timed row with a baseline twin."""
    base = {r.key: r.time_us_median for r in baseline
            if r.status == "ok" and r.time_us_median > 0}
    ratios: dict[tuple[int, str], list[float]] = {}
    for r in rows:
        b = base.get(r.key)
        if r.status == "ok" and b and math.isfinite(r.time_us_median) and r.mode != "cpu":
            ratios.setdefault((r.gpu_index, r.gpu_uuid), []).append(r.time_us_median / b)
    medians = {dev: statistics.median(v) for dev, v in ratios.items()}
    out = []
    for dev, med in sorted(medians.items()):
        others = [m for d, m in medians.items() if d != dev]
        sib = statistics.median(others) if others else math.nan
        out.append(DeviceSpread(dev[0], dev[1], len(ratios[dev]), med, sib,
                                bool(others) and med > sib * (1.0 + min_effect)))
    return out


def device_spread_lines(rows: list[ResultRow], baselines: str | Path, arch: str, matrix: str,
                        min_effect: float, command: str = "harness bench") -> list[str]:
    """The lines ``harness bench --gpus`` prints after its gate, and ``harness report`` of
    its stored run (none for a run on one device, or without a baseline of ``matrix``)."""
    rows = [r for r in rows if r.matrix == matrix]
    if len({(r.gpu_index, r.gpu_uuid) for r in rows}) < 2:
        return []
    path = matrix_dir(baselines, arch, rows[0].device_name, matrix) / f"{matrix}.csv"
    if not path.is_file():
        return [f"{command}: {matrix}: no baseline, so the devices are not compared"]
    lines = []
    for d in device_spread(rows, read_rows(path), min_effect):
        tail = (f"SLOW: {d.median_ratio / d.siblings_ratio - 1:+.1%} against its siblings "
                "(check this GPU: clocks, power, temperature)" if d.slow else "ok")
        lines.append(f"{command}: {matrix} device {d.gpu_index} ({d.gpu_uuid}): {d.rows} "
                     f"rows, median x{d.median_ratio:.3f} of the baseline: {tail}")
    return lines
