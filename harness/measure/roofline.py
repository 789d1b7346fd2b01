"""Bytes each path must move, throughput, the roofline floor and the impossible-time check.

Byte model: the fewest bytes a call must move through device memory (every input read
once, the output written once; re-reads a kernel really does are not counted). Each path
declares its own (``GemmPath.weight_bytes`` / ``weight_formula``, ``bytes_moved``,
``flops``: the weight side per path, A [M, K] and C [M, N] in 2-byte elements, two
weights for a SwiGLU pair); this module asks the path. A path given by name is looked up
among the registered paths; a name no path has, or a path without a byte model, is an
error, never a default.

Roofline: TFLOPS = 2MNK / t, GB/s = bytes / t, t_floor = max(flops / peak_flops,
bytes / bandwidth) with the ceilings MEASURED at the start of the run, pct_roofline =
100 * t_floor / t (percent). A measured time below the floor computed with the DATASHEET maxima
(``DATASHEET``; unknown GPUs: measured x 1.15) is physically impossible: the row is
``rejected`` (a measurement error), never a record. The bandwidth half of that check
applies only when the timed working set exceeded 3 x L2 (``l2_cold``): otherwise
re-reads may come from L2, which is faster than HBM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.cases.case import GemmCase
from harness.kernels.base import ByteModel, GemmPath
from harness.kernels.registry_load import load_all

__all__ = ["DATASHEET", "UNKNOWN_DEVICE_FACTOR", "ByteModel", "Peaks", "Roofline", "bytes_moved",
           "datasheet_peaks", "flops", "roofline"]

#: Datasheet maxima, (name substring, lower case) -> (HBM/GDDR GB/s, dense fp16 tensor TFLOP/s).
#: Maxima on purpose (the fp16-accumulate rate where a card has one): the check must never
#: reject a real measurement. First match wins, so longer names come first.
DATASHEET: tuple[tuple[str, float, float], ...] = (
    ("gh200", 4900.0, 989.0),
    ("h200", 4800.0, 989.0),
    ("h100 pcie", 2000.0, 756.0),
    ("h100 nvl", 3900.0, 835.0),
    ("h100", 3350.0, 989.0),
    ("a100-sxm4-80gb", 2039.0, 312.0),
    ("a100 80gb pcie", 1935.0, 312.0),
    ("a100", 2039.0, 312.0),
    ("l40s", 864.0, 733.0),
    ("l40", 864.0, 362.0),
    ("l4", 300.0, 242.0),
    ("a10", 600.0, 125.0),
    ("rtx 6000 ada", 960.0, 728.0),
    ("rtx a6000", 768.0, 155.0),
    ("4090", 1008.0, 330.0),
    ("3090", 936.0, 142.0),
)
#: Unknown device: the measured ceilings times this factor serve as the maxima.
UNKNOWN_DEVICE_FACTOR = 1.15

def _path(path: GemmPath | str) -> GemmPath:
    """``path`` itself, or the registered path of that name (ValueError for an unknown one)."""
    return path if isinstance(path, GemmPath) else load_all().get(path)


def bytes_moved(path: GemmPath | str, case: GemmCase) -> ByteModel:
    """The byte model of ``path`` on ``case``, asked of the path."""
    return _path(path).bytes_moved(case)


def flops(path: GemmPath | str, case: GemmCase) -> float:
    """The floating-point operations of one call of ``path`` on ``case``."""
    return float(_path(path).flops(case))


@dataclass(frozen=True)
class Peaks:
    """Bandwidth (GB/s, 1e9 B/s) and fp16 rate (TFLOP/s, 1e12/s) used for a floor."""

    gbps: float
    tflops: float
    source: str

    def floor_us(self, flops: float, nbytes: float, use_bandwidth: bool = True) -> float:
        t_flops = flops / (self.tflops * 1e12) * 1e6 if self.tflops > 0 else 0.0
        t_bytes = nbytes / (self.gbps * 1e9) * 1e6 if (self.gbps > 0 and use_bandwidth) else 0.0
        return max(t_flops, t_bytes)


def datasheet_peaks(device_name: str, measured: Peaks | None) -> Peaks | None:
    """Datasheet maxima for ``device_name``; else measured x 1.15; else None."""
    low = device_name.lower()
    for key, gbps, tflops in DATASHEET:
        if key in low:
            return Peaks(gbps, tflops, f"datasheet ({key})")
    if measured is None:
        return None
    f = UNKNOWN_DEVICE_FACTOR
    return Peaks(measured.gbps * f, measured.tflops * f, f"measured x {f}")


@dataclass(frozen=True)
class Roofline:
    """Throughput and roofline figures of one timed row."""

    tflops: float
    gbps: float
    bytes_moved: int
    floor_us: float
    pct_roofline: float
    impossible_floor_us: float
    rejected_reason: str = ""


def roofline(case: GemmCase, path: GemmPath | str, time_us: float, measured: Peaks | None,
             maxima: Peaks | None, l2_cold: bool = True) -> Roofline:
    """TFLOPS, GB/s, floor and % of roofline for ``time_us``; flags an impossible time."""
    path = _path(path)
    bm = bytes_moved(path, case)
    n_flops = flops(path, case)
    if not (time_us > 0 and math.isfinite(time_us)):
        return Roofline(math.nan, math.nan, bm.total, math.nan, math.nan, math.nan,
                        f"time {time_us!r} us is not a positive number")
    t = time_us * 1e-6
    floor = measured.floor_us(n_flops, bm.total) if measured else math.nan
    hard = maxima.floor_us(n_flops, bm.total, use_bandwidth=l2_cold) if maxima else math.nan
    reason = ""
    if math.isfinite(hard) and time_us < hard:
        which = "compute and bandwidth" if l2_cold else "compute (working set within 3 x L2)"
        reason = (f"{time_us:.3f} us is below the physical floor {hard:.3f} us "
                  f"({which}; {maxima.source}: {maxima.gbps:.0f} GB/s, "
                  f"{maxima.tflops:.0f} TFLOP/s)")
    return Roofline(
        tflops=n_flops / t / 1e12, gbps=bm.total / t / 1e9, bytes_moved=bm.total,
        floor_us=floor,
        pct_roofline=(100.0 * floor / time_us) if math.isfinite(floor) else math.nan,
        impossible_floor_us=hard, rejected_reason=reason,
    )
