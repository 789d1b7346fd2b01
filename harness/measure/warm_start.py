"""A fresh GPU machine's two slow starts, overlapped: the extension's compile and the case data.

On a machine that has not run the bench before, the first path that needs the harness's
CUDA extension compiles it (25-35 s on an H200 host while its C++ glue parsed
``<torch/extension.h>``; its slowest unit now takes about 8 s), and every case's weights
and activations are generated in fp64 on the CPU (20 s for production + swiglu on an H100
host made whole, a few seconds in row chunks, ``cases.streams``). One after
the other they were the first ~50 s of a fresh machine's job. ``OverlappedStart`` asks
each selected path whether it is available (which builds, or loads, the extension where a
path needs it) in a thread as soon as the paths are known, and while that thread waits on
nvcc this thread generates the matrices' case data into the disk cache
(``cases.data_cache``), from which the measuring loop then loads it.

On a machine that has the build cached the thread ends within ``wait_s`` and nothing is
generated ahead (the loop loads or generates as before). With the data cache off
(``HARNESS_DATA_CACHE=0``) there is nowhere to keep the data: only the build is waited for.

The phase's wall time is reported as stages (``stages``): ``build``, the wait beyond the
data, and ``data``, the generation done meanwhile; the bench adds them to the first
matrix's ``wall_s_by_stage``, so the job's time line shows both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence

import torch

from harness.cases.case import GemmCase
from harness.cases.data import case_data
from harness.cases.data_cache import cache_root
from harness.kernels.base import GemmPath


def _ask(paths: Sequence[GemmPath], device: torch.device) -> None:
    for path in paths:
        try:
            path.unavailable_reason(device)   # builds or loads what the path needs, once
        except Exception:  # noqa: BLE001 - the measuring loop asks again and reports it
            pass


class OverlappedStart:
    """Start the paths' build now (a thread); ``finish(cases)`` overlaps it with the data.

    Extension point: none; a path's own slow start belongs in its ``unavailable_reason``
    (asked here first) or its ``prepare`` (measured per case)."""

    def __init__(self, paths: Sequence[GemmPath], device: torch.device, *,
                 wait_s: float = 2.0) -> None:
        self.wait_s = wait_s
        self.thread: threading.Thread | None = None
        if device.type == "cuda" and paths:
            # not a daemon: a process that ends early (an error, Ctrl-C) waits for the
            # compile instead of killing it holding torch's build lock (a stale lock file
            # would stop the next build)
            self.thread = threading.Thread(target=_ask, args=(list(paths), device),
                                           name="harness-build", daemon=False)
            self.thread.start()

    def finish(self, cases: Iterable[GemmCase]) -> dict[str, float]:
        """Generate ``cases``' data while the build runs (when it is a compile, not a load
        from the cache), wait for it; the phase's stages in seconds (empty on a CPU)."""
        if self.thread is None:
            return {}
        t0 = time.perf_counter()       # what the thread did before (environment, ceilings)
        self.thread.join(self.wait_s)  # overlapped with them is not counted here
        data_s = 0.0
        if self.thread.is_alive() and cache_root() is not None:
            t1 = time.perf_counter()
            for case in cases:
                case_data(case)                  # into the disk cache; the loop loads it
            data_s = time.perf_counter() - t1
        self.thread.join()
        wall = time.perf_counter() - t0
        return {"build": max(0.0, wall - data_s), **({"data": data_s} if data_s else {})}
