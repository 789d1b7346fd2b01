"""The eager ('cold') timer keeps the host ahead of the device (harness.measure.timing).

    python3 -m pytest tests/gpu/test_timing_gpu.py

A step whose kernel is short (a 256x256 fp16 add, ~2-3 µs) behind a slow host (a 40 µs
Python busy wait per call, like a path whose dispatch costs more than its kernel): the
eager timer must report the device's back-to-back time, close to the same calls replayed
from a CUDA graph, not the host's 40 µs; and a timer whose spin is too short must say
that the host fell behind. And with R below the number of rotated copies, both timers
touch every copy in turn on the real device (the rotation across batches).
"""

from __future__ import annotations

import time

import pytest
import torch

from harness.measure.timing import EventBatchTimer, GraphBatchTimer

pytestmark = pytest.mark.gpu
HOST_US = 40.0
CALLS = 64


def _slow_host_step(device):
    # CPU RNG: a graph capture that failed earlier in the process (the planted side_stream
    # defect) can leave the default CUDA generator refusing offsets outside a capture
    xs = [torch.randn(256, 256, dtype=torch.float16).to(device) for _ in range(4)]
    out = torch.empty_like(xs[0])

    def step(i: int) -> None:
        end = time.perf_counter() + HOST_US * 1e-6
        while time.perf_counter() < end:
            pass
        torch.add(xs[i % 4], 1.0, out=out)

    return step


def _median(timer, n=15) -> float:
    timer()
    return sorted(timer() for _ in range(n))[n // 2]


def test_eager_timer_reports_the_device_time_not_the_host(cuda_device):
    step = _slow_host_step(cuda_device)
    eager = EventBatchTimer(step, CALLS, cuda_device)
    t_eager = _median(eager)
    graph = GraphBatchTimer(step, CALLS, cuda_device)
    t_graph = _median(graph)
    graph.close()
    assert eager.behind == 0, eager.note()
    assert t_eager < 0.5 * HOST_US, (t_eager, t_graph)          # not the host's pace
    assert t_eager < 3.0 * t_graph + 3.0, (t_eager, t_graph)    # eager launch gaps only


def test_a_host_that_falls_behind_is_reported(cuda_device):
    step = _slow_host_step(cuda_device)
    timer = EventBatchTimer(step, CALLS, cuda_device)
    timer.MAX_SPIN_US = 1.0                         # no room: the host must fall behind
    t = _median(timer, n=5)
    assert timer.behind == timer.batches == 5, timer.note()      # the first batch is not counted
    assert timer.note().startswith("host behind the device in 5 of 5 eager batches")
    assert t > 0.8 * HOST_US                                      # timed at the host's pace


@pytest.mark.parametrize("mode", ["cold", "graph"])
def test_the_rotation_reaches_every_copy_in_turn(cuda_device, mode):
    from harness.measure.timing import make_timer

    span, calls = 7, 3                                            # graphs: slices of 4 and 3
    counts = torch.zeros(span, dtype=torch.int64, device=cuda_device)
    ones = [torch.nn.functional.one_hot(torch.tensor(j), span).to(cuda_device) for j in range(span)]

    def step(i: int) -> None:
        counts.add_(ones[i % span])

    timer = make_timer(mode, step, calls, cuda_device, span=span)
    torch.cuda.synchronize(cuda_device)
    counts.zero_()
    for _ in range(14):                                           # 14 batches
        t = timer()
        assert t > 0
    getattr(timer, "close", lambda: None)()
    got = counts.cpu().tolist()
    if mode == "cold":
        assert got == [6, 6, 6, 6, 6, 6, 6]                       # 42 calls = 6 rounds of 7 copies
    else:
        assert got == [7] * span                                  # 7 replays of each slice
