"""The batch timers of ``harness.measure.timing``: one per mode, each a callable that runs
one batch of R calls and returns the per-call time in µs (see ``timing``'s docstring).

Rotation across batches: ``step(i)`` runs copy ``i % copies`` of the operands (see
``harness.measure.rotation``). A timer is given R (``calls``) and ``span`` (the number of
copies, default R); successive batches continue the index where the last one stopped
(eager and CPU) or replay, round-robin, graphs captured over contiguous slices of the
copies (``index_slices``), so every call meets a copy untouched since all the others were
used, whatever R is. R therefore covers only the batch-length floor, not every copy: a
7.9 ms call is timed one per batch instead of once per copy.

Extension points: a new mode is a class with ``mode``, ``__call__() -> float`` (µs per call,
device-side for a GPU), optionally ``note() -> str`` (a remark for the row) and
``close()``, registered in ``TIMERS`` and ``timing.MODES``. The timer of an existing mode
can be supplied from outside the product (a ``harness bench --plugin`` file, a test) with
``register_timer(mode, factory)``: e.g. a timer reading a hardware counter, or the test
suite's deterministic timer (``CpuBatchTimer`` on a virtual clock, ``clock_ns``). The run's
json lists the plugins, so a run timed by another timer says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch

from . import escape

MODES = ("cold", "graph", "cpu")


class TimingError(ValueError):
    """Bad timing input or configuration; the message names the offending field."""


def check_calls_span(calls: int, span: int | None) -> int:
    """``span`` (None: ``calls``) after checking both are >= 1."""
    if calls < 1:
        raise TimingError(f"calls: must be >= 1, got {calls}")
    span = calls if span is None else span
    if span < 1:
        raise TimingError(f"span: must be >= 1, got {span}")
    return span


def index_slices(calls: int, span: int) -> list[range]:
    """The step indices of each graph for R = ``calls`` over ``span`` copies: one slice
    0..R-1 when R >= span; else span // R contiguous slices that partition 0..span-1, each
    of R to 2R-1 calls (sizes differ by at most one), so consecutive replays never share a
    copy and each copy is reused only after all the others."""
    span = check_calls_span(calls, span)
    if calls >= span:
        return [range(calls)]
    n = span // calls
    size, extra = divmod(span, n)
    out, start = [], 0
    for g in range(n):
        stop = start + size + (g < extra)
        out.append(range(start, stop))
        start = stop
    return out


class _Rotation:
    """The next batch's first step index, advanced by R modulo ``span`` after each batch."""

    def __init__(self, calls: int, span: int | None) -> None:
        self.span = check_calls_span(calls, span)
        self.calls, self.next = calls, 0

    def batch(self) -> range:
        first = self.next
        self.next = (first + self.calls) % self.span
        return range(first, first + self.calls)


class CpuBatchTimer:
    """``clock_ns`` (default ``time.perf_counter_ns``) around R synchronous CPU calls;
    returns us per call. ``clock_ns`` is the seam for another clock (any callable giving
    nanoseconds, e.g. a virtual clock that the timed calls advance)."""

    mode = "cpu"

    def __init__(self, step: Callable[[int], object], calls: int, span: int | None = None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self._rot = _Rotation(calls, span)
        self.step, self.calls, self.clock_ns = step, calls, clock_ns

    def __call__(self) -> float:
        step, idx, clock_ns = self.step, self._rot.batch(), self.clock_ns
        t0 = clock_ns()
        for i in idx:
            step(i)
        return (clock_ns() - t0) / 1e3 / self.calls


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

    def __init__(self, step: Callable[[int], object], calls: int, device,
                 span: int | None = None) -> None:
        self._rot = _Rotation(calls, span)
        self.step, self.calls, self.device = step, calls, device
        self._torch = torch
        self._cycles_per_us = escape.sleep_cycles_per_us(torch.device(device))
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self.host_us = 20.0 * calls               # first guess: 20 µs of Python per call
        self.batches = 0                          # after the first (its spin is the guess's)
        self.behind = 0
        self._sized = False

    def __call__(self) -> float:
        torch, step, idx = self._torch, self.step, self._rot.batch()
        spin_us = min(self.MAX_SPIN_US, self.HEADROOM * self.host_us + self.SPIN_PAD_US)
        torch.cuda._sleep(max(1, int(spin_us * self._cycles_per_us)))
        t0 = time.perf_counter()
        self._start.record()
        for i in idx:
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
                "(a host stall longer than the spin's headroom: "
                "those batches may hold device idle time)")


class GraphBatchTimer:
    """R calls captured in a CUDA graph, replayed between two events; with ``span`` > R,
    one graph per slice of ``index_slices`` (R to 2R-1 calls each), replayed round-robin;
    the per-call time divides by the replayed slice's length.

    ``idle_ratio``: after each batch the device is left idle for ``idle_ratio`` x the
    batch's time (host sleep), so replays run at a bounded duty cycle. Why: back-to-back
    replays of a compute-heavy GEMM (fp16 cuBLAS at M = 1024) hold an H200 at its power
    cap; NVML showed the SM clock at 1500-1700 MHz with the software power-cap reason set
    during graph replays and 1850-1980 MHz during eager batches of the same calls, and the
    kernels inside the graph ran 4-6% longer than the same kernels eager (profiler). How
    far the clock drops differs between GPUs and with temperature, which is what made
    those rows move 6-12% between machines. At a 50% duty cycle (``idle_ratio`` 1) the
    replays run unthrottled. The idle time is outside the events: it is not timed.
    """

    mode = "graph"

    def __init__(self, step: Callable[[int], object], calls: int, device,
                 span: int | None = None, idle_ratio: float = 0.0) -> None:
        slices = index_slices(calls, check_calls_span(calls, span))
        self.calls, self.device, self._torch = calls, device, torch
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):             # allocations/handles outside the capture
            for idx in slices:
                for i in idx:
                    step(i)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        self.graphs, self.lengths = [], [len(idx) for idx in slices]
        for idx in slices:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in idx:
                    step(i)
            self.graphs.append(graph)
        torch.cuda.synchronize(device)
        self._next = 0
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        if not idle_ratio >= 0:
            raise TimingError(f"idle_ratio: must be >= 0, got {idle_ratio!r}")
        self.idle_ratio = float(idle_ratio)

    def __call__(self) -> float:
        g = self._next
        self._next = (g + 1) % len(self.graphs)
        self._start.record()
        self.graphs[g].replay()
        self._end.record()
        self._torch.cuda.synchronize(self.device)
        batch_ms = self._start.elapsed_time(self._end)
        if self.idle_ratio > 0:
            time.sleep(self.idle_ratio * batch_ms / 1e3)     # the device idles, untimed
        return batch_ms * 1e3 / self.lengths[g]

    def close(self) -> None:
        for graph in self.graphs:
            graph.reset()


class TimerFactory(Protocol):
    """Builds the batch timer of one mode: ``factory(step, calls, device, span, idle_ratio)``
    (the arguments of ``make_timer``; a factory ignores those its timer does not use)."""

    def __call__(self, step: Callable[[int], object], calls: int, device, span: int | None,
                 idle_ratio: float): ...


def _cpu(step, calls, device, span, idle_ratio):
    return CpuBatchTimer(step, calls, span)


def _cold(step, calls, device, span, idle_ratio):
    return EventBatchTimer(step, calls, device, span)


def _graph(step, calls, device, span, idle_ratio):
    return GraphBatchTimer(step, calls, device, span, idle_ratio=idle_ratio)


#: The timer factory of each mode, what ``make_timer`` builds; see ``register_timer``.
TIMERS: dict[str, TimerFactory] = {"cpu": _cpu, "cold": _cold, "graph": _graph}


def register_timer(mode: str, factory: TimerFactory) -> TimerFactory:
    """Time ``mode`` (one of ``MODES``) with ``factory`` from now on in this process; returns
    the factory it replaces (to put it back). Every timing of the mode goes through it: the
    runner's pilot batch and its samples, the perplexity model's forwards, the studies."""
    if mode not in MODES:
        raise TimingError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    if not callable(factory):
        raise TimingError(f"timer factory for {mode!r} is not callable: {factory!r}")
    previous = TIMERS[mode]
    TIMERS[mode] = factory
    return previous


def make_timer(mode: str, step: Callable[[int], object], calls: int, device=None,
               span: int | None = None, idle_ratio: float = 0.0):
    """The ``BatchTimer`` of ``mode`` (one of ``MODES``, built by ``TIMERS[mode]``): R =
    ``calls`` per batch, rotating over ``span`` step indices (None: ``calls``, every batch
    the same indices 0..R-1); ``idle_ratio`` is the graph timer's untimed idle after each
    batch (see ``GraphBatchTimer``)."""
    factory = TIMERS.get(mode)
    if factory is None:
        raise TimingError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    return factory(step, calls, device, span, idle_ratio)
