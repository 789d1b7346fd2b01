"""The batch timers of ``harness.measure.timing``: one per mode, each a callable that runs
one batch of R calls and returns the per-call time in µs (see ``timing``'s docstring).

Extension point: a new mode is a class with ``mode``, ``__call__() -> float`` (µs per call,
device-side for a GPU), optionally ``note() -> str`` (a remark for the row) and
``close()``, registered in ``make_timer`` and ``timing.MODES``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MODES = ("cold", "graph", "cpu")


class TimingError(ValueError):
    """Bad timing input or configuration; the message names the offending field."""


class CpuBatchTimer:
    """perf_counter_ns around R synchronous CPU calls; returns us per call."""

    mode = "cpu"

    def __init__(self, step: Callable[[int], object], calls: int) -> None:
        if calls < 1:
            raise TimingError(f"calls: must be >= 1, got {calls}")
        self.step, self.calls = step, calls

    def __call__(self) -> float:
        step, calls = self.step, self.calls
        t0 = time.perf_counter_ns()
        for i in range(calls):
            step(i)
        return (time.perf_counter_ns() - t0) / 1e3 / calls


class EventBatchTimer:
    """Eager R calls between two CUDA events on the current stream ('cold' mode), host ahead.

    Before each batch the stream spins (``torch.cuda._sleep``) for ``HEADROOM`` x the host's
    enqueue time of the previous batch (+ ``SPIN_PAD_US``), so all R calls are enqueued
    before the device reaches the start event: the events then time the device running R
    eagerly launched calls back to back, the gaps between separate launches included,
    Python's dispatch time not (it is the harness's launcher, not the runtime's). Without
    the spin a path whose kernels are shorter than its Python dispatch is timed at the
    host's pace, which moved by tens of percent between processes on the H200 (measurement
    doc, section 8.6). Right after the end event is recorded, ``start.query()`` says whether
    the device had already passed the start event; such a batch (the host fell behind) is
    counted in ``behind`` (of ``batches``, the first batch left out: its spin is a guess)
    and the next spin sized from its longer enqueue time. Keep R x
    launches per call well under the driver's queue of pending launches (the runner caps
    cold batches at ``MAX_CALLS["cold"]`` calls): a full queue blocks the host while the
    device spins.
    """

    mode = "cold"
    HEADROOM = 1.5
    SPIN_PAD_US = 50.0
    MAX_SPIN_US = 50_000.0

    def __init__(self, step: Callable[[int], object], calls: int, device) -> None:
        import torch

        from .escape import sleep_cycles_per_us

        if calls < 1:
            raise TimingError(f"calls: must be >= 1, got {calls}")
        self.step, self.calls, self.device = step, calls, device
        self._torch = torch
        self._cycles_per_us = sleep_cycles_per_us(torch.device(device))
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self.host_us = 20.0 * calls               # first guess: 20 µs of Python per call
        self.batches = 0                          # after the first (its spin is the guess's)
        self.behind = 0
        self._sized = False

    def __call__(self) -> float:
        torch, step = self._torch, self.step
        spin_us = min(self.MAX_SPIN_US, self.HEADROOM * self.host_us + self.SPIN_PAD_US)
        torch.cuda._sleep(max(1, int(spin_us * self._cycles_per_us)))
        t0 = time.perf_counter()
        self._start.record()
        for i in range(self.calls):
            step(i)
        self._end.record()
        self.host_us = (time.perf_counter() - t0) * 1e6
        ahead = not self._start.query()           # the device was still spinning
        torch.cuda.synchronize(self.device)       # every stream, before reading the events
        if self._sized:
            self.batches += 1
            self.behind += not ahead
        self._sized = True
        return self._start.elapsed_time(self._end) * 1e3 / self.calls

    def note(self) -> str:
        """'' or how many batches the host did not keep ahead of the device."""
        if not self.behind:
            return ""
        return (f"host behind the device in {self.behind} of {self.batches} eager batches "
                "(a host stall longer than the spin's headroom: those batches may hold device idle time)")


class GraphBatchTimer:
    """The same R calls captured once in a CUDA graph, replayed between two events."""

    mode = "graph"

    def __init__(self, step: Callable[[int], object], calls: int, device) -> None:
        import torch

        if calls < 1:
            raise TimingError(f"calls: must be >= 1, got {calls}")
        self.calls, self.device, self._torch = calls, device, torch
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):             # allocations/handles outside the capture
            for i in range(calls):
                step(i)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            for i in range(calls):
                step(i)
        torch.cuda.synchronize(device)
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def __call__(self) -> float:
        self._start.record()
        self.graph.replay()
        self._end.record()
        self._torch.cuda.synchronize(self.device)
        return self._start.elapsed_time(self._end) * 1e3 / self.calls

    def close(self) -> None:
        self.graph.reset()


def make_timer(mode: str, step: Callable[[int], object], calls: int, device=None):
    """The ``BatchTimer`` of ``mode`` (one of ``MODES``)."""
    if mode == "cpu":
        return CpuBatchTimer(step, calls)
    if mode == "cold":
        return EventBatchTimer(step, calls, device)
    if mode == "graph":
        return GraphBatchTimer(step, calls, device)
    raise TimingError(f"mode: {mode!r} is not one of {', '.join(MODES)}")


