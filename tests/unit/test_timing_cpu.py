"""Timing statistics, the stopping rule, the CPU timer, clocks and rotation planning."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from harness.config import ConfigError, load_settings
from harness.measure import timing as T
from harness.measure.rotation import plan_copies


def test_summarize_hand_computed():
    s = T.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0
    assert s.iqr == pytest.approx(2.0)        # q75 = 4, q25 = 2 (linear interpolation)
    assert s.n == 5
    assert s.ci_lo <= 3.0 <= s.ci_hi
    assert 1.0 <= s.ci_lo and s.ci_hi <= 100.0


def test_bootstrap_is_seeded_and_brackets_the_median():
    rng = np.random.default_rng(0)
    x = rng.normal(10.0, 1.0, 1000)
    a, b = T.bootstrap_median_ci(x), T.bootstrap_median_ci(x)
    assert a == b                              # same samples, same interval
    lo, hi = a
    assert lo < float(np.median(x)) < hi
    # Normal data: the median's standard error is sqrt(pi/2) / sqrt(n).
    expected_half = 1.96 * math.sqrt(math.pi / 2) / math.sqrt(1000)
    assert (hi - lo) / 2 == pytest.approx(expected_half, rel=0.3)


def test_ci_half_width_shrinks_with_samples():
    rng = np.random.default_rng(1)
    small = T.median_ci_halfwidth(rng.normal(100.0, 5.0, 50))
    large = T.median_ci_halfwidth(rng.normal(100.0, 5.0, 5000))
    assert large < small / 5                   # ~ 1/sqrt(n): 10x more samples -> ~3.2x ... 10x
    assert T.median_ci_halfwidth([5.0, 5.0, 5.0, 5.0]) == 0.0
    assert T.median_ci_halfwidth([1.0, 2.0]) == math.inf


def test_bad_samples_raise_naming_the_field():
    with pytest.raises(T.TimingError, match="samples: no samples"):
        T.summarize([])
    with pytest.raises(T.TimingError, match="non-finite"):
        T.summarize([1.0, float("nan")])


def test_keep_evenly_keeps_ends_and_caps():
    kept = T.keep_evenly(list(range(1000)), 200)
    assert len(kept) == 200 and kept[0] == 0 and kept[-1] == 999
    assert kept == sorted(kept)
    assert T.keep_evenly([3.0, 1.0], 200) == [3.0, 1.0]


def _rule(**kw):
    d = dict(warmup_ms=0.0, max_case_seconds=10.0, target_rel_spread=0.01, min_samples=5,
             max_samples=100)
    d.update(kw)
    return T.StopRule(**d)


def test_stop_rule_reasons():
    rule = _rule()
    assert rule.reason_to_stop([1.0] * 4, 0.0) is None            # below min_samples
    assert rule.reason_to_stop([1.0] * 5, 0.0) == "converged"
    noisy = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    assert rule.reason_to_stop(noisy, 0.0) is None
    assert rule.reason_to_stop(noisy, 10.0) == "time_cap"
    assert rule.reason_to_stop(noisy * 20, 0.0) == "max_samples"


def test_stop_rule_validates():
    with pytest.raises(T.TimingError, match="max_samples"):
        _rule(min_samples=10, max_samples=5)
    with pytest.raises(T.TimingError, match="target_rel_spread"):
        _rule(target_rel_spread=0.0)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_sample_until_converges_on_steady_samples():
    clock = FakeClock()
    values = iter([50.0] * 3 + [10.0] * 1000)       # warm-up values are discarded

    def batch():
        clock.t += 0.01                                 # 10 ms host time per batch
        return next(values)

    samples, reason, warm = T.sample_until(batch, _rule(warmup_ms=25.0), clock)
    assert warm == 3                                    # 3 x 10 ms >= 25 ms
    assert reason == "converged" and len(samples) == 5 and set(samples) == {10.0}


def test_sample_until_stops_at_the_time_cap_on_noise():
    clock = FakeClock()
    rng = np.random.default_rng(2)

    def batch():
        clock.t += 0.1
        return float(rng.uniform(1.0, 3.0))

    samples, reason, _ = T.sample_until(batch, _rule(max_case_seconds=2.0, max_samples=10_000),
                                        clock)
    assert reason == "time_cap"
    assert 20 <= len(samples) <= 25                     # ~2 s / 0.1 s, checked every ~5%


def test_sample_until_stops_at_max_samples():
    clock = FakeClock()
    rng = np.random.default_rng(3)
    samples, reason, _ = T.sample_until(lambda: float(rng.uniform(1, 3)), _rule(max_samples=40),
                                        clock)
    assert reason == "max_samples" and len(samples) == 40


def test_cpu_timer_measures_per_call_time():
    def step(i):
        t_end = time.perf_counter() + 200e-6
        while time.perf_counter() < t_end:
            pass

    timer = T.CpuBatchTimer(step, 5)
    per_call = timer()
    assert 200.0 <= per_call < 2000.0


def test_time_batches_flags_a_dropped_clock():
    clocks = iter([(1980.0, ""), (1500.0, "")])
    res = T.time_batches(lambda: 10.0, _rule(), read_clock=lambda: next(clocks),
                         calls_per_batch=4, mode="cold")
    assert res.clock_start_mhz == 1980.0 and res.clock_end_mhz == 1500.0
    assert res.clock_dropped
    assert res.stats.median == 10.0 and res.stop_reason == "converged"
    steady = iter([(1980.0, ""), (1900.0, "")])
    assert not T.time_batches(lambda: 10.0, _rule(), read_clock=lambda: next(steady)).clock_dropped


def test_missing_clock_is_nan_with_reason():
    res = T.time_batches(lambda: 1.0, _rule(), read_clock=lambda: (math.nan, "no pynvml"))
    assert math.isnan(res.clock_start_mhz) and not res.clock_dropped
    assert res.notes == "no pynvml"


def test_choose_calls():
    assert T.choose_calls(5.0, min_batch_us=200.0) == 40
    assert T.choose_calls(500.0, min_batch_us=200.0) == 1        # a long call: one per batch
    assert T.choose_calls(0.001, min_batch_us=200.0, max_calls=4096) == 4096
    with pytest.raises(T.TimingError, match="per_call_us"):
        T.choose_calls(0.0, 200.0)
    assert T.choose_calls(0.001, min_batch_us=200.0, max_calls=128) == 128   # whatever the copies


def test_cold_batches_stay_short_for_the_host_ahead_spin():
    # a 2 µs kernel would need 1000 calls for 2 ms; cold batches stop at 128 calls
    assert T.batch_calls("cold", 2.0) == T.MAX_CALLS["cold"] == 128
    assert T.batch_calls("graph", 2.0) == 500
    # the 7.9 ms native INT4 call of the production matrix (M1024-N2048-K8192 on the H200):
    # one per batch, where R >= copies (7) made every sample 55 ms
    assert T.batch_calls("cold", 7892.0) == T.batch_calls("graph", 7892.0) == 1


def test_plan_copies_exceeds_three_l2():
    mib = 2 ** 20
    plan = plan_copies(32 * mib, 60 * mib)              # int4 8192^2 weight vs H200 L2
    assert plan.copies == 6 and plan.l2_cold           # floor(180 / 32) + 1
    assert plan.working_set_bytes == 192 * mib
    capped = plan_copies(40_000, 60 * mib, max_copies=64)
    assert capped.copies == 64 and not capped.l2_cold
    assert "3 x L2" in capped.note
    cpu = plan_copies(1000, 0)
    assert cpu.copies == 1 and cpu.l2_cold


def test_cold_mode_takes_its_own_minimum_when_one_is_set():
    plain = load_settings("default", overrides={"cold_min_samples": 0})
    assert load_settings("default").cold_min_samples == 10   # the sm90 baselines' value
    assert load_settings("strict").cold_min_samples == 0
    assert {m: T.StopRule.from_settings(plain, m).min_samples for m in ("cold", "graph")} == \
           {"cold": plain.min_samples, "graph": plain.min_samples}
    ten = load_settings("default", overrides={"cold_min_samples": 10})
    assert T.StopRule.from_settings(ten, "cold").min_samples == 10
    assert T.StopRule.from_settings(ten, "graph").min_samples == plain.min_samples
    assert T.StopRule.from_settings(ten).min_samples == plain.min_samples   # ppl, studies
    for bad in (2, 5000):
        with pytest.raises(ConfigError, match="cold_min_samples"):
            load_settings("default", overrides={"cold_min_samples": bad})
