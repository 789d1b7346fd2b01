"""Device-side timing: batches of back-to-back calls, a stopping rule, robust statistics.

A *sample* is one batch of ``R`` back-to-back calls ``step(j) .. step(j+R-1)``; the
per-call time is the batch time / R. ``step(i)`` is built by the runner: call i runs on
rotated copy ``i % P`` of the prepared weight, the activations and the output (see
``harness.measure.rotation``), and the index continues from batch to batch (graphs: one
per slice of P, replayed in turn; ``timers``), so in ``cold`` and ``graph`` modes every
call reads weights that are not in L2 once the P copies' bytes exceed 3x the L2 size,
whether R is below P (long calls) or above it.

Modes (one ``BatchTimer`` each):
  * ``cold``  -- eager: a Python loop of R calls between two CUDA events on the current
    stream, the host kept ahead by a device spin before the batch (``EventBatchTimer``):
    what the device pays for R separately launched calls, launch gaps included, Python's
    dispatch time not.
  * ``graph`` -- the same R calls captured once in a ``torch.cuda.CUDAGraph`` and replayed
    between two CUDA events.
  * ``cpu``   -- ``time.perf_counter_ns`` around R synchronous CPU calls (no GPU).
Every GPU read of an event pair happens after ``torch.cuda.synchronize()`` (all streams),
so work a path leaves on a side stream cannot finish unseen after the clock is read.

Sampling (``sample_until``, Python's garbage collector paused): warm-up batches for
``warmup_ms`` of host time, then batches
until the 95% CI of the median (distribution-free, from order statistics) has a half-width
<= ``target_rel_spread`` x median with at least ``min_samples`` samples, or
``max_case_seconds`` of host time pass, or ``max_samples`` are taken. The reported
statistics (``summarize``) use ALL samples: median, IQR and a seeded percentile-bootstrap
95% CI of the median; at most ``KEEP_SAMPLES`` raw samples are kept, evenly spaced in
acquisition order.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# The batch timers (and the mode names, the error type) live in ``timers``; re-exported.
from .timers import (  # noqa: F401
    MODES,
    CpuBatchTimer,
    EventBatchTimer,
    GraphBatchTimer,
    TimingError,
    make_timer,
)

KEEP_SAMPLES = 200
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240601
_Z95 = 1.959963984540054


# ----------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class SampleStats:
    """Statistics of per-call times (microseconds) computed from every sample."""

    median: float
    iqr: float
    ci_lo: float
    ci_hi: float
    n: int
    rel_spread: float  # order-statistic 95% CI half-width / median (the stopping criterion)


def _as_samples(samples, field: str = "samples") -> np.ndarray:
    x = np.asarray(samples, dtype=np.float64).ravel()
    if x.size == 0:
        raise TimingError(f"{field}: no samples")
    if not np.all(np.isfinite(x)):
        raise TimingError(f"{field}: contains non-finite values")
    return x


def median_ci_halfwidth(samples) -> float:
    """Relative half-width of the distribution-free 95% CI of the median.

    Ranks ``n/2 -/+ 1.96 sqrt(n)/2`` of the sorted samples (normal approximation of the
    binomial); returns (x[hi] - x[lo]) / 2 / median, ``inf`` for fewer than 3 samples.
    """
    x = np.sort(_as_samples(samples))
    n = x.size
    if n < 3:
        return math.inf
    half = _Z95 * math.sqrt(n) / 2.0
    lo = max(0, int(math.floor(n / 2.0 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)))
    med = float(np.median(x))
    if med <= 0:
        return math.inf
    return float(x[hi] - x[lo]) / 2.0 / med


def bootstrap_median_ci(samples, confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                        seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile-bootstrap CI of the median (NumPy, seeded: same samples, same interval)."""
    x = _as_samples(samples)
    if not 0.0 < confidence < 1.0:
        raise TimingError(f"confidence: must be in (0, 1), got {confidence!r}")
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    meds = np.empty(resamples)
    chunk = max(1, 4_000_000 // x.size)            # bound the index matrix's memory
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        meds[start:stop] = np.median(x[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(meds, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def summarize(samples) -> SampleStats:
    """Median, IQR (q75 - q25, linear interpolation), bootstrap 95% CI, relative spread."""
    x = _as_samples(samples)
    q25, med, q75 = np.quantile(x, [0.25, 0.5, 0.75])
    lo, hi = bootstrap_median_ci(x)
    return SampleStats(float(med), float(q75 - q25), lo, hi, int(x.size), median_ci_halfwidth(x))


def keep_evenly(samples, cap: int = KEEP_SAMPLES) -> list[float]:
    """At most ``cap`` samples, evenly spaced in acquisition order (first and last kept)."""
    x = list(samples)
    if cap <= 0:
        raise TimingError(f"cap: must be positive, got {cap}")
    if len(x) <= cap:
        return [float(v) for v in x]
    idx = np.linspace(0, len(x) - 1, cap).round().astype(int)
    return [float(x[i]) for i in idx]


# ----------------------------------------------------------------------------- stop rule
@dataclass(frozen=True)
class StopRule:
    """When to stop sampling. ``from_settings`` reads the harness settings' fields."""

    warmup_ms: float
    max_case_seconds: float
    target_rel_spread: float
    min_samples: int
    max_samples: int

    def __post_init__(self) -> None:
        if not self.warmup_ms >= 0:
            raise TimingError(f"warmup_ms: must be >= 0, got {self.warmup_ms!r}")
        if not self.max_case_seconds > 0:
            raise TimingError(f"max_case_seconds: must be > 0, got {self.max_case_seconds!r}")
        if not self.target_rel_spread > 0:
            raise TimingError(f"target_rel_spread: must be > 0, got {self.target_rel_spread!r}")
        if self.min_samples < 3:
            raise TimingError(f"min_samples: must be >= 3, got {self.min_samples}")
        if self.max_samples < self.min_samples:
            raise TimingError(
                f"max_samples: {self.max_samples} is below min_samples {self.min_samples}")

    @classmethod
    def from_settings(cls, settings, mode: str | None = None) -> StopRule:
        """The rule of ``mode`` (None: the common one): cold mode takes
        ``cold_min_samples`` as its minimum when that is set."""
        low = int(settings.min_samples)
        cold = int(settings.cold_min_samples)
        if mode == "cold" and cold:
            low = cold
        return cls(float(settings.warmup_ms), float(settings.max_case_seconds),
                   float(settings.target_rel_spread), low, int(settings.max_samples))

    def reason_to_stop(self, samples: list[float], elapsed_s: float) -> str | None:
        """'converged', 'max_samples', 'time_cap' or None (keep sampling)."""
        n = len(samples)
        if n >= self.max_samples:
            return "max_samples"
        if n >= self.min_samples and median_ci_halfwidth(samples) <= self.target_rel_spread:
            return "converged"
        if elapsed_s >= self.max_case_seconds and n >= 3:
            return "time_cap"
        return None


def sample_until(batch: Callable[[], float], rule: StopRule,
                 clock: Callable[[], float] = time.perf_counter,
                 after_warmup: Callable[[], object] | None = None) -> tuple[list[float], str, int]:
    """Warm up, then sample ``batch()`` (per-call us) until ``rule`` says stop.

    Returns (samples, stop_reason, warm-up batches). Host time here only bounds the work
    (warm-up length, case time cap); every sample is the timer's own measurement.
    ``after_warmup()`` runs once between warm-up and sampling (the runner reads the clock).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()                                  # no collector pauses inside a batch
    try:
        t0 = clock()
        warm = 0
        while True:                               # at least one warm-up batch
            batch()
            warm += 1
            if (clock() - t0) * 1e3 >= rule.warmup_ms:
                break
        if after_warmup is not None:
            after_warmup()
        samples: list[float] = []
        t1 = clock()
        check_every = 1
        while True:
            samples.append(float(batch()))
            n = len(samples)
            if n % check_every == 0 or n >= rule.max_samples:
                reason = rule.reason_to_stop(samples, clock() - t1)
                if reason:
                    return samples, reason, warm
                check_every = max(1, n // 20)     # re-check after ~5% more samples
    finally:
        if gc_was_enabled:
            gc.enable()


# ----------------------------------------------------------------------------- one case
@dataclass(frozen=True)
class TimingResult:
    """One (case, path, mode) timing: statistics over all samples + what was kept."""

    mode: str
    stats: SampleStats
    samples_kept: tuple[float, ...]
    stop_reason: str
    calls_per_batch: int
    warmup_batches: int
    clock_start_mhz: float
    clock_end_mhz: float
    clock_dropped: bool
    notes: str = ""

    @property
    def median_us(self) -> float:
        return self.stats.median


def clock_dropped(start_mhz: float, end_mhz: float, threshold: float = 0.10) -> bool:
    """True when the end SM clock is more than ``threshold`` below the start clock."""
    if not (math.isfinite(start_mhz) and math.isfinite(end_mhz)) or start_mhz <= 0:
        return False
    return end_mhz < (1.0 - threshold) * start_mhz


def time_batches(timer: Callable[[], float], rule: StopRule,
                 read_clock: Callable[[], tuple[float, str]] | None = None,
                 calls_per_batch: int = 1, mode: str = "cpu") -> TimingResult:
    """Warm up, sample until the stop rule, summarise every sample.

    ``read_clock()`` returns (SM clock MHz or NaN, note); it is read right after warm-up
    (the GPU busy, so not an idle clock) and right after the last sample. None: no clock.
    """
    clocks: list[tuple[float, str]] = []
    on_warm = (lambda: clocks.append(read_clock())) if read_clock is not None else None
    samples, reason, warm = sample_until(timer, rule, after_warmup=on_warm)
    if read_clock is not None:
        clocks.append(read_clock())
    start, end = (clocks[0], clocks[-1]) if clocks else ((math.nan, ""), (math.nan, ""))
    timer_note = getattr(timer, "note", None)
    parts = (start[1], end[1], timer_note() if timer_note else "")
    notes = "; ".join(dict.fromkeys(n for n in parts if n))
    return TimingResult(
        mode=mode, stats=summarize(samples), samples_kept=tuple(keep_evenly(samples)),
        stop_reason=reason, calls_per_batch=calls_per_batch, warmup_batches=warm,
        clock_start_mhz=start[0], clock_end_mhz=end[0],
        clock_dropped=clock_dropped(start[0], end[0]), notes=notes,
    )


def choose_calls(per_call_us: float, min_batch_us: float, max_calls: int = 4096) -> int:
    """R: a batch >= ``min_batch_us``, at most ``max_calls`` calls, at least one. Not tied
    to the number of rotated copies: the timers continue the rotation across batches."""
    if not per_call_us > 0 or not math.isfinite(per_call_us):
        raise TimingError(f"per_call_us: must be a positive number, got {per_call_us!r}")
    need = math.ceil(min_batch_us / per_call_us)
    return int(max(1, min(max_calls, need)))


#: Shortest batch per mode (µs): the latency before a batch's first kernel starts (a graph
#: launch ~5-10 µs, measured on an H200 as the gap between event time and profiler kernel
#: time at R = 4) is amortised to <~1%.
MIN_BATCH_US = {"cold": 2000.0, "graph": 1000.0, "cpu": 1000.0}
#: Most calls per batch per mode. Cold batches stay well under the driver's queue of
#: pending launches (about a thousand; a 4-kernel call x 128 = 512), which the host-ahead
#: spin of ``EventBatchTimer`` needs; its spin also removes the start latency that
#: ``MIN_BATCH_US`` amortises, so a shorter cold batch costs nothing.
MAX_CALLS = {"cold": 128, "graph": 4096, "cpu": 4096}


def batch_calls(mode: str, per_call_us: float) -> int:
    """R for ``mode`` from a pilot's per-call time (``choose_calls`` with the mode's limits)."""
    return choose_calls(per_call_us, MIN_BATCH_US[mode], MAX_CALLS[mode])
