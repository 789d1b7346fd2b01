"""The clock the planted paths pace themselves by (test code only).

``SlowdownPath`` on a CPU makes a call ``fraction`` longer by waiting on ``current()``:
by default the host's ``time.perf_counter`` (a busy wait, what a real slow kernel costs);
``use(VirtualClock())`` switches every planted path in this process to a virtual clock
that only the timed work advances (``planted.fake_timer``), so their timings are
deterministic: the same code gives the same time on any machine, whatever its load.
"""

from __future__ import annotations

import time


class HostClock:
    """``time.perf_counter``; ``wait`` spins the host (a CPU path is synchronous)."""

    def now(self) -> float:
        """Seconds, monotonic."""
        return time.perf_counter()

    def wait(self, seconds: float) -> None:
        """Busy-wait ``seconds``."""
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


class VirtualClock:
    """A clock that moves only when told: ``advance``/``wait`` add seconds, nothing else
    does. ``now_ns`` is the ``clock_ns`` a ``CpuBatchTimer`` reads."""

    def __init__(self) -> None:
        self._ns = 0

    def now(self) -> float:
        return self._ns / 1e9

    def now_ns(self) -> int:
        return self._ns

    def advance(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"a clock cannot go back ({seconds!r} s)")
        self._ns += round(seconds * 1e9)

    def wait(self, seconds: float) -> None:
        self.advance(seconds)


_CURRENT: HostClock | VirtualClock = HostClock()


def current() -> HostClock | VirtualClock:
    """The clock planted paths wait on now."""
    return _CURRENT


def use(clock: HostClock | VirtualClock) -> HostClock | VirtualClock:
    """Make ``clock`` the planted paths' clock; returns the previous one."""
    global _CURRENT
    previous, _CURRENT = _CURRENT, clock
    return previous
