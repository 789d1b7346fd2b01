"""Rotation of copies across batches in every timer (``timers``), without a GPU.

The CPU timer runs as is. The graph timer runs against a fake ``torch.cuda`` that records
which step indices each graph captured and which graph each sample replays (the eager
timer's rotation is tested on the simulated device of test_eager_timer_cpu.py). What must
hold: a copy is used again only after every other copy, for R below, equal to or above
the number of copies.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from harness.measure import timers


def test_index_slices():
    assert timers.index_slices(8, 8) == [range(0, 8)]
    assert timers.index_slices(50, 8) == [range(0, 50)]         # R above the copies: one graph
    assert timers.index_slices(3, 7) == [range(0, 4), range(4, 7)]   # a partition, >= R each
    assert timers.index_slices(1, 4) == [range(i, i + 1) for i in range(4)]
    assert timers.index_slices(56, 82) == [range(0, 82)]        # as before: one graph of every copy
    for calls, span in ((3, 7), (2, 5), (7, 100), (1, 1), (5, 5)):
        sl = timers.index_slices(calls, span)
        assert [i for r in sl for i in r] == list(range(max(calls, span)))
        assert all(calls <= len(r) < 2 * calls for r in sl) or len(sl) == 1
    with pytest.raises(timers.TimingError, match="span"):
        timers.index_slices(2, 0)
    with pytest.raises(timers.TimingError, match="calls"):
        timers.index_slices(0, 3)


def test_cpu_timer_continues_the_rotation():
    seen: list[int] = []
    t = timers.make_timer("cpu", lambda i: seen.append(i % 5), 2, span=5)
    for _ in range(5):
        t()
    assert seen == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]              # each copy once per 5 calls
    seen.clear()
    t = timers.make_timer("cpu", lambda i: seen.append(i), 3)  # no span: the same 3 each time
    t()
    t()
    assert seen == [0, 1, 2, 0, 1, 2]


class FakeCuda:
    """Just enough of torch.cuda for GraphBatchTimer: graphs record their captured calls."""

    def __init__(self, monkeypatch):
        self.capturing = None
        self.eager: list[int] = []
        self.replayed: list[list[int]] = []
        fake = self

        class Graph:
            def __init__(self):
                self.calls: list[int] = []

            def replay(self):
                fake.replayed.append(list(self.calls))

            def reset(self):
                self.calls = []

        @contextlib.contextmanager
        def graph(g):
            fake.capturing = g
            yield
            fake.capturing = None

        class Stream:
            def __init__(self, device=None):
                pass

            def wait_stream(self, other):
                pass

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def elapsed_time(self, other):
                return 1.0

        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", graph)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)

    def step(self, span):
        def run(i):
            (self.capturing.calls if self.capturing is not None else self.eager).append(i % span)
        return run


@pytest.mark.parametrize("calls,span", [(3, 7), (1, 4), (8, 8), (20, 6), (2, 5)])
def test_graph_timer_replays_slices_round_robin(monkeypatch, calls, span):
    fake = FakeCuda(monkeypatch)
    t = timers.GraphBatchTimer(fake.step(span), calls, "cuda:0", span=span)
    slices = timers.index_slices(calls, span)
    assert len(t.graphs) == len(slices)
    assert sorted(set(fake.eager)) == list(range(span))         # every copy warmed before capture
    per_call = [t() for _ in range(3 * len(slices))]
    assert per_call == [pytest.approx(1e3 / len(slices[k % len(slices)]))
                        for k in range(len(per_call))]
    assert fake.replayed[:len(slices)] == [[i % span for i in r] for r in slices]
    flat = [i for batch in fake.replayed for i in batch]
    if calls < span:                       # each copy comes back only after all the others
        assert all(flat[k] == flat[k % span] for k in range(len(flat)))
        assert flat[:span] == list(range(span))
    t.close()


@pytest.mark.parametrize("ratio", [0.0, 1.0, 3.0])
def test_graph_timer_idles_after_each_batch_untimed(monkeypatch, ratio):
    """``idle_ratio`` x the batch's event time of host sleep after each replay (the duty
    cycle that keeps the GPU off its power cap); the returned time is the events' alone."""
    fake = FakeCuda(monkeypatch)                 # every batch reads 1.0 ms between its events
    slept: list[float] = []
    monkeypatch.setattr(timers.time, "sleep", slept.append)
    t = timers.make_timer("graph", fake.step(4), 4, "cuda:0", span=4, idle_ratio=ratio)
    assert [t() for _ in range(3)] == [pytest.approx(250.0)] * 3      # 1 ms / 4 calls, in us
    assert slept == ([pytest.approx(ratio * 1e-3)] * 3 if ratio else [])
    with pytest.raises(timers.TimingError, match="idle_ratio"):
        timers.GraphBatchTimer(fake.step(4), 4, "cuda:0", idle_ratio=-1.0)
