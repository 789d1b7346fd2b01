"""Benchmark cases as pytest-benchmark tests: one per (case, path, mode), ids = case ids.

What pytest-benchmark stores and compares is the DEVICE-SIDE per-call time: the test uses
pedantic mode with ``timer=DEVICE_CLOCK``, a clock that advances only by the per-call time
each round's target measured with CUDA events (or perf_counter_ns around synchronous CPU
calls in cpu mode) over one batch of rotated, L2-cold calls. The test then checks that
pytest-benchmark's own statistics equal the harness's statistics of the same samples, and
puts the harness statistics (median, IQR, bootstrap CI, R, copies, accuracy) in extra_info.

    pytest tests/bench --benchmark-save=base            # store
    pytest tests/bench --benchmark-compare=0001 --benchmark-compare-fail=median:5%
    HARNESS_BENCH_MATRIX=production pytest tests/bench -k "marlin_asym and cold"
"""

from __future__ import annotations

import math

import pytest

from harness.kernels.base import PATHS
from harness.measure.single import DeviceClock, setup_timing
from harness.measure.timing import summarize

pytestmark = pytest.mark.bench
DEVICE_CLOCK = DeviceClock()
MIN_ROUNDS, MAX_ROUNDS = 10, 2000


def _rounds(batch_us: float, budget_s: float) -> int:
    return int(min(MAX_ROUNDS, max(MIN_ROUNDS, budget_s / (batch_us * 1e-6))))


@pytest.mark.benchmark(timer=DEVICE_CLOCK, disable_gc=True)
def test_bench(benchmark, bench_case, path_name, mode, device, bench_seconds):
    path = PATHS.get(path_name)
    reason = path.unavailable_reason(device)
    if reason:
        pytest.skip(f"{path_name}: {reason}")
    if bench_case.kind != "gemm":
        pytest.skip(f"case kind {bench_case.kind!r} is not a single GEMM")
    try:
        setup = setup_timing(bench_case, path, device, mode)
    except Exception as exc:
        from harness.kernels.base import UnsupportedCase

        if isinstance(exc, UnsupportedCase):
            pytest.skip(f"{path_name}: {exc}")
        raise
    samples: list[float] = []

    def one_batch():
        us = setup.batch()
        samples.append(us)
        DEVICE_CLOCK.advance(us * 1e-6)

    warm = setup.batch()                                  # estimate the batch length
    batch_us = warm * setup.calls
    try:
        benchmark.pedantic(one_batch, rounds=_rounds(batch_us, bench_seconds),
                           warmup_rounds=max(1, int(0.025 / (batch_us * 1e-6))), iterations=1)
    finally:
        setup.close()
    if benchmark.disabled:
        return
    # Warm-up rounds also call the target; pytest-benchmark keeps only the timed rounds.
    stats = benchmark.stats.stats
    timed = samples[-stats.rounds:]
    mine = summarize(timed)
    assert stats.rounds == len(timed)
    assert math.isclose(stats.median * 1e6, mine.median, rel_tol=1e-9)
    assert math.isclose(stats.min * 1e6, min(timed), rel_tol=1e-9)
    assert math.isclose(stats.max * 1e6, max(timed), rel_tol=1e-9)
    acc = setup.accuracy
    benchmark.extra_info.update(
        case_id=bench_case.id, path=path_name, mode=mode, device=str(device),
        implementation=path.implementation(device), timer="device-side per-call time",
        median_us=mine.median, iqr_us=mine.iqr, ci95_lo_us=mine.ci_lo, ci95_hi_us=mine.ci_hi,
        n_samples=mine.n, calls_per_batch=setup.calls, rotated_copies=setup.plan.copies,
        l2_cold=setup.plan.l2_cold, rel_err=acc.rel_err, max_ulp=acc.max_ulp,
    )
