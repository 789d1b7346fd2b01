"""A deterministic timer for CPU runs (test code only): virtual time instead of the host's.

``install()`` puts three things in place in this process:

* a ``VirtualClock`` (``planted.clock``), which the planted paths then wait on too (the
  5% ``SlowdownPath`` adds 5% of the virtual time of the call it wraps);
* every registered path wrapped, innermost (under any planted wrapper), in a
  ``VirtualCostPath``: the real call runs (accuracy is measured as usual), then the
  clock advances by a cost model of the call (``cost_seconds``: a fixed launch cost plus
  a rate per multiply-add) times a seeded jitter of ``JITTER`` (relative sd), drawn per
  (path, shape) in call order, so samples spread like measurements do;
* the product's ``cpu`` timer replaced (``harness.measure.timers.register_timer``, the
  documented seam) by ``CpuBatchTimer`` reading the virtual clock.

A run's times then depend on the code measured only: two runs of one commit agree within
the jitter, a planted slowdown shows as exactly that. Used by ``fake_timer_plugin.py``
(``harness bench --plugin``), e.g. by the bisect and history tests.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from harness.kernels.base import PATHS, GemmPath, PathRegistry
from harness.kernels.registry_load import load_all
from harness.measure.timers import TIMERS, CpuBatchTimer, register_timer

from . import clock
from .paths import WrappedPath

LAUNCH_SECONDS = 20e-6        # per call
SECONDS_PER_MAC = 2e-10       # 5 GMAC/s: long virtual calls, few of them per batch (fast)
JITTER = 0.004                # relative sd of one call's virtual time


def cost_seconds(path: str, M: int, N: int, K: int) -> float:
    """The model's time of one call of ``path`` on an (M, K) x (K, N) product; each path
    gets its own rate (1.0-1.5x) so the paths differ, as real ones do."""
    rate = 1.0 + (zlib.crc32(path.encode()) % 50) / 100.0
    return LAUNCH_SECONDS + SECONDS_PER_MAC * rate * M * N * K


class VirtualCostPath(WrappedPath):
    """``inner``, then the virtual clock advanced by the cost model (with jitter)."""

    def __init__(self, inner: GemmPath, virtual: clock.VirtualClock) -> None:
        super().__init__(inner)
        self.virtual = virtual
        self._rngs: dict[tuple[int, int, int], np.random.Generator] = {}

    def run(self, prepared, A, out):
        self.inner.run(prepared, A, out)
        M, K, N = int(A.shape[0]), int(A.shape[1]), int(out.shape[1])
        rng = self._rngs.get((M, N, K))
        if rng is None:
            seed = zlib.crc32(f"{self.name}|{M}|{N}|{K}".encode())
            rng = self._rngs[(M, N, K)] = np.random.default_rng(seed)
        jitter = max(0.5, 1.0 + JITTER * float(rng.standard_normal()))
        self.virtual.advance(cost_seconds(self.name, M, N, K) * jitter)
        return out


def _wrap_innermost(path: GemmPath, virtual: clock.VirtualClock) -> GemmPath:
    if isinstance(path, VirtualCostPath):
        return path
    if isinstance(path, WrappedPath):
        path.inner = _wrap_innermost(path.inner, virtual)
        return path
    return VirtualCostPath(path, virtual)


def install(registry: PathRegistry | None = None) -> clock.VirtualClock:
    """Virtual time for this process (see the module docstring); returns the clock. For
    good: a plugin's process ends with it (``virtual_time`` undoes it, for a test)."""
    reg = registry if registry is not None else PATHS
    if reg is PATHS:
        load_all()
    current = clock.current()
    virtual = current if isinstance(current, clock.VirtualClock) else clock.VirtualClock()
    clock.use(virtual)
    for name in reg.names():
        reg.replace(name, _wrap_innermost(reg.get(name), virtual))

    def virtual_cpu_timer(step, calls, device, span, idle_ratio):
        return CpuBatchTimer(step, calls, span, clock_ns=virtual.now_ns)

    register_timer("cpu", virtual_cpu_timer)
    return virtual


@contextmanager
def virtual_time(registry: PathRegistry) -> Iterator[clock.VirtualClock]:
    """``install`` on ``registry`` (a test's own) for a with-block; the product's ``cpu``
    timer, the planted paths' clock and the registry's paths are put back after."""
    paths = {n: registry.get(n) for n in registry.names()}
    inners = []                                   # (wrapper, its inner) down every chain
    for path in paths.values():
        while isinstance(path, WrappedPath):
            inners.append((path, path.inner))
            path = path.inner
    previous_clock, previous_timer = clock.current(), TIMERS["cpu"]
    try:
        yield install(registry)
    finally:
        register_timer("cpu", previous_timer)
        clock.use(previous_clock)
        for wrapper, inner in inners:
            wrapper.inner = inner
        for name, path in paths.items():
            registry.replace(name, path)
