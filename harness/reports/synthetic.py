"""Synthetic result rows, for tests and for trying the reports without a GPU.

Nothing here is a measurement: times come from a toy cost model (a bandwidth/compute
roofline per path plus fixed launch costs) with seeded lognormal noise on every sample,
so gate tests can plant slowdowns, errors and fallbacks and know the right verdict.
Rows are tagged ``synthetic`` and ``device_name`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..results.schema import ResultRow
from .stats import with_samples

PATHS = ("native_int4", "fp16_cache", "marlin_asym")
PEERS = ("tinygemm", "marlin_fused_zero")
_BW = 4.3e12          # bytes/s
_PEAK = 790e12        # fp16 flop/s
_LAUNCH_US = 4.0


def _case_id(m: int, n: int, k: int, gs: int, seed: int = 0) -> str:
    return f"M{m}-N{n}-K{k}-{'gK' if gs == k else f'g{gs}'}-s{seed}"


def _model_us(path: str, m: int, n: int, k: int, gs: int) -> tuple[float, float, int]:
    """(time µs, roofline floor µs, extra bytes) of the toy model."""
    flops = 2.0 * m * n * k
    int4_bytes = n * k / 2 + 2 * m * k + 2 * m * n + 4 * (k // gs) * n
    floor = max(int4_bytes / _BW, flops / _PEAK) * 1e6
    if path == "native_int4":
        return flops / 6.8e12 * 1e6 + int4_bytes / _BW * 1e6 + _LAUNCH_US, floor, 0
    if path == "fp16_cache":
        fp16_bytes = 2 * n * k + 2 * m * k + 2 * m * n
        return max(fp16_bytes / _BW, flops / (0.7 * _PEAK)) * 1e6 + _LAUNCH_US, floor, 2 * n * k
    if path == "marlin_asym":
        t = max(int4_bytes / (0.55 * _BW), flops / (0.45 * _PEAK)) * 1e6 + 3 * _LAUNCH_US
        return t, floor, 4 * (k // gs) * n + 4 * m * (k // gs)
    t = max(int4_bytes / (0.5 * _BW), flops / (0.2 * _PEAK)) * 1e6 + _LAUNCH_US
    return t, floor, n * k // 2


def make_rows(
    *, matrix: str = "synthetic",
    shapes: Iterable[tuple[int, int, int]] = ((2048, 2048, 128), (6144, 2048, 2048)),
    ms: Iterable[int] = (1, 16, 64, 256), paths: Sequence[str] = PATHS,
    peers: Sequence[str] = PEERS,
    modes: Sequence[str] = ("graph",), seed: int = 0, noise: float = 0.005, n_samples: int = 60,
    slowdown: Mapping[str, float] | None = None, arch: str = "sm90", device: str = "synthetic H200",
    commit: str = "0" * 40, cpu: bool = False,
) -> list[ResultRow]:
    """Rows for every (shape, M, path, mode). ``slowdown[path]`` multiplies a path's times;
    ``cpu=True`` gives the all-NaN timing/roofline columns of a CPU run."""
    rng = np.random.default_rng(seed)
    slowdown = dict(slowdown or {})
    rows = []
    for n, k, gs in shapes:
        for m in ms:
            marlin = m >= 16 and k % 128 == 0 and n % 128 == 0
            dispatch = "marlin_asym" if marlin else "native_int4"
            for path in (*paths, *peers):
                for mode in modes:
                    t, floor, extra = _model_us(path, m, n, k, gs)
                    t *= slowdown.get(path, 1.0) * (1.08 if mode == "cold" else 1.0)
                    rel = float(2e-4 * rng.lognormal(0, 0.2)) * (3 if path == "marlin_asym" else 1)
                    row = ResultRow(
                        matrix=matrix, case_id=_case_id(m, n, k, gs), path=path,
                        mode="cpu" if cpu else mode,
                        M=m, N=n, K=k, group_size=gs, tags="synthetic",
                        role="peer" if path in peers else "path",
                        implementation=f"synthetic {path}",
                        arch="cpu" if cpu else arch,
                        device_name="cpu (synthetic)" if cpu else device,
                        commit=commit, dispatch_path=dispatch,
                        fallback_reason="" if dispatch == "marlin_asym" else "M < 16",
                        rel_err=rel, rel_fro_err=rel * 1.1, max_ulp=float(rng.integers(1, 6)),
                        p99_ulp=float(rng.integers(0, 2)), mean_ulp=0.2, frac_ulp_over_budget=0.0,
                        rms_ulp_p99=rel * 4000.0, rms_ulp_max=rel * 6000.0,   # no extra rng draws
                        extra_bytes=extra, prepare_seconds=0.01,
                    )
                    if cpu:
                        rows.append(replace(row, extra_bytes=0))
                        continue
                    row = replace(row, time_us_median=t, roofline_floor_us=floor,
                                  pct_roofline=floor / t * 100,
                                  tflops=2.0 * m * n * k / (t * 1e-6) / 1e12, gbps=math.nan,
                                  bytes_moved=int(n * k / 2))
                    if path == "marlin_asym":
                        marlin_only = t - 2 * _LAUNCH_US
                        row = replace(row, marlin_only_us=marlin_only,
                                      correction_overhead_pct=2 * _LAUNCH_US / marlin_only * 100)
                    rows.append(with_samples(row, t * rng.lognormal(0.0, noise, n_samples)))
    return rows


def resample(rows: Sequence[ResultRow], seed: int, noise: float = 0.005,
             factor: Mapping[tuple[str, str, str] | str, float] | None = None) -> list[ResultRow]:
    """A fresh draw of every timed row around its model time (``factor`` by key or path)."""
    rng = np.random.default_rng(seed)
    factor = dict(factor or {})
    out = []
    for r in rows:
        if r.n_samples == 0 or r.status != "ok":
            out.append(r)
            continue
        t, _, _ = _model_us(r.path, r.M, r.N, r.K, r.group_size)
        t *= (1.08 if r.mode == "cold" else 1.0) * factor.get(r.key, factor.get(r.path, 1.0))
        fresh = replace(r, time_us_median=t, tflops=2.0 * r.M * r.N * r.K / (t * 1e-6) / 1e12,
                        pct_roofline=r.roofline_floor_us / t * 100)
        out.append(with_samples(fresh, t * rng.lognormal(0.0, noise, r.n_samples)))
    return out
