"""The stream-escape check: device work that outlives the timed stream.

CUDA events time what is enqueued on the stream they are recorded on. A path that
launches its kernel on a side stream the caller's stream never waits for looks fast to
the events (they time the enqueue). ``escaped_work`` catches it by measuring how long the
device stays busy after a batch's end event; the runner calls it once per cold case.

The check's batch keeps the host AHEAD of the device: the timed stream first spins
(``torch.cuda._sleep``) for twice the host's own enqueue time of the batch, so every call
is enqueued before any runs. Without that, a fast kernel (a decode GEMM of a few µs)
launched from a slower host finishes on its side stream as soon as it is enqueued, and
nothing is left to see after the end event (the H200 run of 2026-12-02 missed it so).
"""

from __future__ import annotations

import gc
import time

import torch

#: The stream-escape check (``escaped_work``): a device still busy this long after a cold
#: batch's end event (and this fraction of the batch) ran work the events did not time.
ESCAPE_MIN_US = 200.0
ESCAPE_FRACTION = 0.2


def escaped_work(batch, tries: int = 2) -> str | None:
    """Why device work outlived the timed stream, or None.

    ``batch()`` runs one eager batch between two events on the current stream, waits for
    the END EVENT only, then for the whole device, and returns (event us, tail us): how
    long the device stayed busy after the end event. Work left on a stream the caller
    never waits for is invisible to the events (they time its enqueue), not to the tail.
    A tail above ``max(ESCAPE_MIN_US, ESCAPE_FRACTION x event us)`` in ``tries`` batches
    in a row (one could be a host hiccup) is reported.
    """
    for _ in range(tries):
        event_us, tail_us = batch()
        if tail_us <= max(ESCAPE_MIN_US, ESCAPE_FRACTION * event_us):
            return None
    return (f"work outside the timed stream: the device stayed busy {tail_us:.0f} us after "
            f"the end event of a {event_us:.0f} us batch (a kernel on a side stream the "
            "caller's stream never waits for)")


_CYCLES_PER_US: dict[int, float] = {}


def sleep_cycles_per_us(device: torch.device) -> float:
    """``torch.cuda._sleep`` cycles per µs on ``device`` (measured once per process)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CYCLES_PER_US:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        probe = 1_000_000
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        end.synchronize()
        _CYCLES_PER_US[index] = probe / max(1e-3, start.elapsed_time(end) * 1e3)
    return _CYCLES_PER_US[index]


def event_tail_batch(step, calls: int, device: torch.device):
    """``escaped_work``'s batch on a CUDA device (host kept ahead: see the module doc)."""
    def batch() -> tuple[float, float]:
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for i in range(calls):                    # the host's enqueue time of one batch
            step(i)
        host_us = (time.perf_counter() - t0) * 1e6
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        gc_on = gc.isenabled()
        gc.disable()                              # no collector pause inside the tail
        try:
            torch.cuda._sleep(max(1, int((2.0 * host_us + 50.0) * sleep_cycles_per_us(device))))
            start.record()
            for i in range(calls):
                step(i)
            end.record()
            end.synchronize()
            t0 = time.perf_counter()
            torch.cuda.synchronize(device)
            tail_us = (time.perf_counter() - t0) * 1e6
        finally:
            if gc_on:
                gc.enable()
        return start.elapsed_time(end) * 1e3, tail_us

    return batch
