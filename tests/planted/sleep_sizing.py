"""Sizing the planted slowdown's device spin, so the gate's own timer sees the asked share.

``SlowdownPath`` adds ``torch.cuda._sleep(cycles)`` after every call of the path it wraps.
``size_sleep`` picks ``cycles`` for one (prepared weight, M) so that a graph-mode row of
the bench reads ``fraction`` slower. What it has to get right, each measured on H200s:

* **The call's own time, as the gate's graph rows see it.** The bench times calls over
  rotated copies of the operands (``harness.measure.rotation``: weights not in L2) in CUDA
  graphs with an idle duty cycle (``GraphBatchTimer``, ``graph_idle_ratio``). Timing one
  buffer over and over reads the L2 instead: at M = 1024 and on the K = 8192 rows, the
  spin sized that way came out at +2.9..4.0% instead of 5% (docs/measurement.md §9.3).
  So the call is timed here the same way: rotated copies, the bench's graph timer.
* **What the spin really adds beside the call.** Its kernel node costs something of its
  own, and part of that hides behind the call before it; a model of "node + cycles /
  rate" from spins timed alone gave +0.8..10% on one row in three processes. So the
  share is measured closed-loop: graphs of the call alone and of the call plus a first
  guess, timed in alternation (what drifts hits both); the node's own share follows from
  their difference and fixes the cycles; a last pair of graphs measures the share it
  delivers (``measured_fraction``, kept in the plan).

Where the node alone costs more than ``fraction`` (calls of a few µs), one cycle is
planted and the slowdown is larger than asked; the plan says so. A call that cannot be
captured falls back to eager calls between events (``eager_plan``).
"""

from __future__ import annotations

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


def size_sleep(run: Callable, prepared, A: torch.Tensor, out: torch.Tensor,
               fraction: float) -> dict:
    """The plan for one (prepared, M): cycles, and what was measured to choose them.

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

    def timer(cycles: int) -> GraphBatchTimer:
        def step(i: int):
            inner(i)
            if cycles:
                torch.cuda._sleep(cycles)
        return GraphBatchTimer(step, calls, device, idle_ratio=idle)

    node_alone, rate = spin_rate(graph_us)
    timers = [timer(0)]
    try:
        (t0,) = _alternate(timers, 3)
        guess = max(1, round(fraction * t0 / rate))
        timers.append(timer(guess))
        t0, t1 = _alternate(timers, PAIRS)
        node = (t1 - t0) - guess * rate        # the node's own cost beside this call
        cycles = max(1, round((fraction * t0 - node) / rate))
        timers.append(timer(cycles))
        t0, t2 = _alternate([timers[0], timers[2]], PAIRS)
    finally:
        for t in timers:
            t.close()
        del ops
    return {"timer": "graph, rotated copies", "copies": copies, "inner_us": t0,
            "sleep_node_alone_us": node_alone, "sleep_node_us": node, "us_per_cycle": rate,
            "guess_cycles": guess, "cycles": cycles,
            "expected_fraction": (node + cycles * rate) / t0 if t0 > 0 else float("nan"),
            "measured_fraction": t2 / t0 - 1.0 if t0 > 0 else float("nan")}


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
            "cycles": cycles,
            "expected_fraction": (node + cycles * rate) / t0 if t0 > 0 else float("nan")}
