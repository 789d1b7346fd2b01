"""The product's timer seam (``register_timer``, ``CpuBatchTimer(clock_ns=)``) and the test
suite's deterministic fake timer on it: the same code gives the same times, the planted
5% slowdown shows as 5%, and everything is put back after."""

from __future__ import annotations

import pytest
import torch
from planted import clock, defects, fake_timer

from harness.cases.case import GemmCase
from harness.config import load_settings
from harness.kernels.base import PathRegistry
from harness.kernels.registry_load import load_all
from harness.measure import timers
from harness.measure.runner import RunContext, Runner

CASES = [GemmCase(M=16, N=256, K=512, group_size=128, seed=3),
         GemmCase(M=1, N=256, K=256, group_size=128, seed=3)]
FAST = {"warmup_ms": 1, "max_case_seconds": 0.5}


def _medians(reg: PathRegistry) -> dict:
    ctx = RunContext(matrix="t", device=torch.device("cpu"), settings=load_settings(overrides=FAST),
                     modes=("cpu",), registry=reg, arch="cpu", device_name="cpu", commit="t")
    return {r.key: r.time_us_median for r in Runner(ctx).run(CASES)}


def _registry() -> PathRegistry:
    reg = PathRegistry()
    reg.register(load_all().get("fp16_cache"))
    reg.register(load_all().get("native_int4"))
    return reg


def test_register_timer_checks_and_returns_what_it_replaces():
    with pytest.raises(timers.TimingError, match="not one of"):
        timers.register_timer("warp", lambda *a: None)
    with pytest.raises(timers.TimingError, match="not callable"):
        timers.register_timer("cpu", 3)
    seen = []

    def factory(step, calls, device, span, idle_ratio):
        seen.append((calls, span))
        return timers.CpuBatchTimer(step, calls, span, clock_ns=iter(range(0, 10**9, 500)).__next__)

    previous = timers.register_timer("cpu", factory)
    try:
        t = timers.make_timer("cpu", lambda i: None, 4, span=8)
        assert seen == [(4, 8)] and t() == pytest.approx(0.5 / 4)   # 500 ns over 4 calls
    finally:
        assert timers.register_timer("cpu", previous) is factory
    assert timers.TIMERS["cpu"] is previous


def test_fake_timer_is_deterministic_and_shows_the_planted_slowdown_exactly():
    reg = _registry()
    with fake_timer.virtual_time(reg):
        first, second = _medians(reg), _medians(reg)
        with defects.get("slowdown_5pct").plant(path="fp16_cache", registry=reg):
            slow = _medians(reg)
    for key, t in first.items():
        assert t == pytest.approx(second[key], rel=2e-3)          # the same code, the same time
        M = 16 if key[0].startswith("M16") else 1
        K = 512 if M == 16 else 256
        assert t == pytest.approx(fake_timer.cost_seconds(key[1], M, 256, K) * 1e6, rel=5e-3)
        expected = 1.05 if key[1] == "fp16_cache" else 1.0
        assert slow[key] / t == pytest.approx(expected, abs=3e-3)
    # put back: the product's timer, the host clock, the registry's own paths
    assert timers.TIMERS["cpu"].__name__ == "_cpu"
    assert isinstance(clock.current(), clock.HostClock)
    assert type(reg.get("fp16_cache")).__name__ == "Fp16CachePath"


def test_the_slowdown_wraps_the_cost_model_whatever_the_plugin_order():
    reg = _registry()
    with defects.get("slowdown_5pct").plant(path="fp16_cache", registry=reg) as planted:
        with fake_timer.virtual_time(reg):
            assert isinstance(planted.inner, fake_timer.VirtualCostPath)
            slow = _medians(reg)
        assert not isinstance(planted.inner, fake_timer.VirtualCostPath)
    key = (CASES[0].id, "fp16_cache", "cpu")
    assert slow[key] == pytest.approx(1.05e6 * fake_timer.cost_seconds("fp16_cache", 16, 256, 512),
                                      rel=5e-3)
