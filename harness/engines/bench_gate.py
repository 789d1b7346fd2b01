"""A ``harness bench --plugin`` that holds the bench until a file exists: the gate of a
pipelined A/B (``pipeline.run_pipelined``).

Plugins run after the bench has imported torch, created its CUDA context and registered
the paths, and before it generates data or measures anything; this one waits there until
the file named by ``$HARNESS_BENCH_GATE`` exists, so a process can start up while the
previous bench measures, and measure only after it has exited. Without the variable it
does nothing. On reaching the gate it writes the time (``time.time()``) into the file
named by the gate's path plus ``.ready``: the runner's time line (``bench_runner``) tells
a bench's start-up from its measuring by it. It gives up, with one line naming the gate,
after ``$HARNESS_BENCH_GATE_TIMEOUT`` seconds (default 3600) or when the process that
started it has gone. When the bench is done (``atexit``: its results written, the
interpreter about to tear down torch and the CUDA context) it writes the time into the
gate's path plus ``.exit``: the time line tells the process's exit from its measuring.
Standard library only: the bench of an older revision runs this file too.
"""

import atexit
import os
import sys
import time


def wait_for_gate(path: str, timeout_s: float, poll_s: float = 0.01) -> None:
    """Return when ``path`` exists; exit the process with one line if ``timeout_s`` pass
    or the parent process is gone first."""
    parent = os.getppid()
    try:
        with open(path + ".ready", "w") as fh:
            fh.write(repr(time.time()))
    except OSError:
        pass                                  # the time line only: never stop the bench
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"harness bench: gate {path} was not opened within {timeout_s:g} s")
        if os.getppid() != parent:
            sys.exit(f"harness bench: the process holding gate {path} has gone")
        time.sleep(poll_s)


def mark_exit(path: str) -> None:
    """Write the time into ``path`` + ``.exit`` (at interpreter exit); never raises."""
    try:
        with open(path + ".exit", "w") as fh:
            fh.write(repr(time.time()))
    except OSError:
        pass


_GATE = os.environ.get("HARNESS_BENCH_GATE", "")
if _GATE:
    wait_for_gate(_GATE, float(os.environ.get("HARNESS_BENCH_GATE_TIMEOUT", "3600")))
    atexit.register(mark_exit, _GATE)
