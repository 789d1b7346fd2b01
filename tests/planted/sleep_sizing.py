"""Sizing the planted slowdown's device spin, so the gate's own timer sees the asked share.

``SlowdownPath`` adds ``torch.cuda._sleep(cycles)`` after every ``period``-th call of the
path it wraps. ``size_sleep`` picks both for one (prepared weight, M) so that a graph-mode
row of the bench reads ``fraction`` slower. What it has to get right, each measured on H200s:

* **The call's own time, as the gate's graph rows see it.** The bench times calls over
  rotated copies of the operands (``harness.measure.rotation``: weights not in L2) in CUDA
  graphs with an idle duty cycle (``GraphBatchTimer``, ``graph_idle_ratio``). Timing one
  buffer over and over reads the L2 instead: at M = 1024 and on the K = 8192 rows, the
  spin sized that way came out at +2.9..4.0% instead of 5% (docs/measurement.md §9.3).
  So the call is timed here the same way: rotated copies, the bench's graph timer.
* **What the spin really adds beside the call.** Its kernel node costs something of its
  own, and part of that hides behind the call before it; a model of "node + cycles /
  rate" from spins timed alone gave +0.8..10% on one row in three processes, and the
  node's cost beside a 6-µs call, read as the difference of two graphs' medians times
  the period, scattered from -0.9 to +1.3 µs (32 plans of d3, 2026-12-05: planted shares
  of +2% to +29%). So the share is measured closed-loop and corrected: graphs of the call
  alone and of the call plus the spin, timed in alternation (what drifts hits both), the
  cycles moved by the share missing (``next_cycles``) until the delivered share is within
  ``TOLERANCE`` of the asked one (at most ``TRIES``); the plan keeps every try and the
  share of the one chosen (``measured_fraction``).

* **A node that costs more than the share.** A spin node costs ~1-2 µs of its own beside
  a call (H100, H200), more than 3% of every call under ~50 µs: one spin per call
  planted 3.5-17% instead of 3% on 50 of 56 production rows of fp16_cache (c2 of
  2026-12-05). So the spin goes after every ``period``-th call only, sized to
  ``fraction`` x ``period`` calls' time: ``period`` is the smallest that leaves the node
  at most ``NODE_SHARE`` of the spin's budget. A graph of R calls then holds R/period
  spins, give or take one: the planted share is ``fraction`` within period/R (R is at
  least 1000 µs of calls, so within ~5% of the asked share at 3%).

A call that cannot be captured falls back to eager calls between events
(``eager_plan``, one spin per call).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch

from harness.config import load_settings
from harness.measure.ceilings import l2_cache_bytes
from harness.measure.rotation import build_operands, plan_copies, prepared_nbytes
from harness.measure.timers import GraphBatchTimer

#: calls per graph: at least this many, and at least one per rotated copy
GRAPH_CALLS = 20
#: timed batches per graph in each alternation (medians of these)
PAIRS = 9
#: the spin's rate is timed on a spin this long
PROBE_CYCLES = 100_000
#: rotated copies at most (a few hundred MB on an H200)
MAX_COPIES = 64
#: the spin node's own cost is at most this share of the spin's budget (sets the period)
NODE_SHARE = 0.75
#: closed loop: at most this many measured tries, done within this share of the asked share
TRIES = 5
TOLERANCE = 0.1
#: each graph timed holds at least this much of the call's time (the bench's graph batches
#: are >= 1000 µs: ``harness.measure.timing.MIN_BATCH_US``)
MIN_GRAPH_US = 1000.0


def _events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def graph_us(fn: Callable[[], object], calls: int, replays: int = 7) -> float:
    """Median µs per call of ``calls`` back-to-back ``fn()`` captured in one CUDA graph."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    start, end = _events()
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    return statistics.median(times)


def eager_us(fn: Callable[[], object], calls: int) -> float:
    """Median µs of one eager ``fn()`` between two events (launch latency included)."""
    start, end = _events()
    fn()
    times = []
    for _ in range(calls):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def spin_rate(per_call: Callable[[Callable[[], object], int], float]) -> tuple[float, float]:
    """(µs of a 1-cycle spin alone, µs per cycle), timed by ``per_call``."""
    node = per_call(lambda: torch.cuda._sleep(1), GRAPH_CALLS)
    probe = per_call(lambda: torch.cuda._sleep(PROBE_CYCLES), GRAPH_CALLS)
    rate = (probe - node) / (PROBE_CYCLES - 1)
    return node, max(1e-9, rate)


def _alternate(timers: list[GraphBatchTimer], batches: int) -> list[float]:
    """Median µs per call of each timer, their batches taken in turn (one warm-up each)."""
    for t in timers:
        t()
    got: list[list[float]] = [[] for _ in timers]
    for _ in range(batches):
        for i, t in enumerate(timers):
            got[i].append(t())
    return [statistics.median(g) for g in got]


def spin_period(fraction: float, inner_us: float, node_us: float) -> int:
    """Calls per spin: the smallest number whose ``fraction`` of time leaves the node at
    most ``NODE_SHARE`` of the spin's budget (1 for calls long enough)."""
    per_call = fraction * inner_us
    if not per_call > 0 or not node_us > 0:
        return 1
    return max(1, math.ceil(node_us / (NODE_SHARE * per_call)))


def next_cycles(cycles: int, period: int, got: float, fraction: float, inner_us: float,
                rate: float) -> tuple[int, int]:
    """(cycles, period) for the next try, from the share ``got`` that ``cycles`` delivered:
    the cycles moved by the time missing (or over) per period; where fewer than one cycle
    would be needed (the node alone delivers more than the share), one more call per
    period instead."""
    want = cycles + (fraction - got) * inner_us * period / rate
    if want >= 1:
        return round(want), period
    return 1, period + 1


def converge(share: Callable[[int, int], tuple[float, float]], fraction: float, period: int,
             cycles: int, rate: float) -> tuple[int, int, float, float, list]:
    """The closed loop: ``share(cycles, period)`` measures (delivered share, the call's
    µs); the cycles are corrected (``next_cycles``) until the share is within
    ``TOLERANCE`` of ``fraction``, at most ``TRIES`` times. Returns the try closest to
    ``fraction``: (period, cycles, its share, the call's µs then, every try as [period,
    cycles, share])."""
    tries: list[tuple[int, int, float, float]] = []
    for _ in range(TRIES):
        got, inner_us = share(cycles, period)
        tries.append((period, cycles, got, inner_us))
        if not math.isfinite(got) or abs(got - fraction) <= TOLERANCE * fraction:
            break
        cycles, period = next_cycles(cycles, period, got, fraction, inner_us, rate)
    best = min(tries, key=lambda t: abs(t[2] - fraction) if math.isfinite(t[2]) else math.inf)
    return best[0], best[1], best[2], best[3], [list(t[:3]) for t in tries]


def size_sleep(run: Callable, prepared, A: torch.Tensor, out: torch.Tensor,
               fraction: float) -> dict:
    """The plan for one (prepared, M): the spin's period and cycles, and what was measured
    to choose them.

    ``run(prepared, A, out)`` is the wrapped path's call. Raises when the call cannot be
    captured in a CUDA graph (the caller then uses ``eager_plan``)."""
    device = prepared.device
    per_copy = (prepared_nbytes(prepared) + A.numel() * A.element_size()
                + out.numel() * out.element_size())
    copies = plan_copies(per_copy, l2_cache_bytes(device), max_copies=MAX_COPIES).copies
    ops = build_operands(prepared, A, copies)
    calls = max(GRAPH_CALLS, ops.copies)
    idle = load_settings().graph_idle_ratio
    inner = ops.step_fn(run)

    def timer(cycles: int, period: int, call_us: float | None) -> GraphBatchTimer:
        def step(i: int):
            inner(i)
            if cycles and i % period == period - 1:
                torch.cuda._sleep(cycles)
        # a whole number of periods per graph, and (once the call's time is known) a graph
        # of >= MIN_GRAPH_US, as the bench's batches are: the share sized is the one the
        # bench's rows see
        n = calls if call_us is None else max(calls, math.ceil(MIN_GRAPH_US / call_us))
        return GraphBatchTimer(step, period * math.ceil(n / period), device, idle_ratio=idle)

    node_alone, rate = spin_rate(graph_us)
    timers = [timer(0, 1, None)]
    try:
        (t0,) = _alternate(timers, 3)
        timers[0].close()
        timers = [timer(0, 1, max(t0, 0.5))]     # a graph of >= MIN_GRAPH_US now
        # the period from the node alone (stable: 1.16-1.33 µs over 32 plans of d3, where
        # its cost beside the call, a difference of two medians times the period, read
        # -0.9..+1.3 µs), the first cycles from it too; then the share measured and the
        # cycles corrected until it is within TOLERANCE of the asked share
        period = spin_period(fraction, t0, node_alone)
        cycles = max(1, round((fraction * t0 * period - node_alone) / rate))

        def share(cycles: int, period: int) -> tuple[float, float]:
            """(the share these deliver, the call's own µs), the two graphs alternated."""
            trial = timer(cycles, period, max(t0, 0.5))
            try:
                alone, spun = _alternate([timers[0], trial], PAIRS)
            finally:
                trial.close()
            return (spun / alone - 1.0 if alone > 0 else float("nan")), alone

        period, cycles, got, t0, tries = converge(share, fraction, period, cycles, rate)
    finally:
        for t in timers:
            t.close()
        del ops
    return {"timer": "graph, rotated copies", "copies": copies, "inner_us": t0,
            "sleep_node_alone_us": node_alone, "us_per_cycle": rate, "period": period,
            "cycles": cycles, "tries": tries,
            "expected_fraction": got, "measured_fraction": got}   # the share it delivered


def eager_plan(run: Callable, prepared, A: torch.Tensor, out: torch.Tensor,
               fraction: float) -> dict:
    """The plan for a call that cannot be captured: eager calls between events, the spin's
    node and rate timed alone (open loop)."""
    scratch = torch.empty_like(out)
    torch.cuda.synchronize()
    t0 = eager_us(lambda: run(prepared, A, scratch), GRAPH_CALLS)
    node, rate = spin_rate(eager_us)
    cycles = max(1, round((fraction * t0 - node) / rate))
    return {"timer": "eager", "inner_us": t0, "sleep_node_us": node, "us_per_cycle": rate,
            "period": 1, "cycles": cycles,
            "expected_fraction": (node + cycles * rate) / t0 if t0 > 0 else float("nan")}
