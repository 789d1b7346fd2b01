"""The host-ahead eager timer's logic (``timers.EventBatchTimer``) on a simulated device.

No GPU: ``torch.cuda``'s sleep, events and synchronize are replaced by a model in which
the device spins for the requested cycles starting when ``_sleep`` is called and the start
event is reached when the spin ends; host time is a fake clock that each call advances.
The GPU side (a real device) is tests/gpu/test_timing_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from harness.measure import escape, timers

RATE = 1000.0            # sleep cycles per µs
DEVICE_MS = 0.5          # what the fake events report for a batch


class Sim:
    def __init__(self, monkeypatch, host_us_per_call):
        self.now_us = 0.0
        self.spin_end_us = 0.0
        self.spins: list[float] = []                      # µs of each spin asked for
        self.host_us_per_call = host_us_per_call          # a list: one value per batch
        self.batch = -1
        sim = self

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def query(self):
                return sim.now_us >= sim.spin_end_us

            def elapsed_time(self, other):
                return DEVICE_MS

        def sleep(cycles):
            sim.batch += 1
            sim.spins.append(cycles / RATE)
            sim.spin_end_us = sim.now_us + cycles / RATE

        class Clock:
            @staticmethod
            def perf_counter():
                return sim.now_us * 1e-6

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "_sleep", sleep)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(escape, "sleep_cycles_per_us", lambda device: RATE)
        monkeypatch.setattr(timers, "time", Clock)

    def step(self, i):
        self.now_us += self.host_us_per_call[min(self.batch, len(self.host_us_per_call) - 1)]


def _timer(sim, calls=64):
    return timers.EventBatchTimer(sim.step, calls, "cuda:0")


def test_the_spin_covers_the_last_enqueue_time(monkeypatch):
    sim = Sim(monkeypatch, [10.0])                        # 64 calls x 10 µs = 640 µs of host
    t = _timer(sim)
    per_call = [t() for _ in range(5)]
    # the events' time, not the host's
    assert per_call == [pytest.approx(DEVICE_MS * 1e3 / 64)] * 5
    assert sim.spins[0] == pytest.approx(1.5 * 20.0 * 64 + 50.0)      # first: the 20 µs/call guess
    assert sim.spins[1:] == [pytest.approx(1.5 * 640.0 + 50.0)] * 4   # then 1.5 x measured + 50
    assert (t.batches, t.behind, t.note()) == (4, 0, "")


def test_a_slow_first_batch_is_not_counted_and_the_next_spin_grows(monkeypatch):
    sim = Sim(monkeypatch, [40.0])                        # 2560 µs of host > the first spin
    t = _timer(sim)
    for _ in range(4):
        t()
    assert sim.spins[1] == pytest.approx(1.5 * 2560.0 + 50.0)
    assert (t.batches, t.behind) == (3, 0)


def test_a_host_stall_beyond_the_headroom_is_counted(monkeypatch):
    sim = Sim(monkeypatch, [10.0, 10.0, 10.0, 30.0, 10.0])  # batch 3: the host 3x slower
    t = _timer(sim)
    for _ in range(6):
        t()
    assert (t.batches, t.behind) == (5, 1)
    assert t.note().startswith("host behind the device in 1 of 5 eager batches")


def test_the_spin_is_capped(monkeypatch):
    sim = Sim(monkeypatch, [10_000.0])                    # 640 ms of host per batch
    t = _timer(sim)
    t.MAX_SPIN_US = 2000.0
    for _ in range(3):
        t()
    assert max(sim.spins) == pytest.approx(2000.0)
    assert t.behind == t.batches == 2


def test_the_rotation_continues_across_batches(monkeypatch):
    # R = 3 calls over 7 rotated copies: call k meets copy k % 7, across batch boundaries
    sim = Sim(monkeypatch, [10.0])
    seen: list[int] = []

    def step(i):
        seen.append(i % 7)
        sim.step(i)

    t = timers.EventBatchTimer(step, 3, "cuda:0", span=7)
    for _ in range(7):
        t()
    assert seen == [k % 7 for k in range(21)]
