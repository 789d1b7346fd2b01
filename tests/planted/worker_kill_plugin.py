"""A ``harness bench --plugin`` file for the sharded bench's tests: a worker that dies.

In a worker of ``harness bench --gpus`` (``$HARNESS_WORKER_DEVICE`` is its device), the
path ``$HARNESS_KILL_PATH`` (default ``native_int4``) sends SIGKILL to its own process when
it runs a case with ``M == $HARNESS_KILL_M``, on the devices listed in
``$HARNESS_KILL_DEVICES`` (comma list; default every device): what the OOM killer or a
kernel fault does to a worker. With ``$HARNESS_KILL_ONCE`` (a file path) only the first
time: the kill creates that file, and a worker that finds it lets the case run. Outside
a worker, or on other cases, the path is unchanged. With ``$HARNESS_KILL_HANG=1`` the
worker hangs instead (a kernel that never returns), after creating ``$HARNESS_KILL_ONCE``.
"""

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the ``planted`` package

from planted.defects import swapped_path  # noqa: E402
from planted.paths import WrappedPath  # noqa: E402


class KillingPath(WrappedPath):
    """Kills its own worker process on the chosen cases and devices."""

    def run(self, prepared, A, out):
        device = os.environ.get("HARNESS_WORKER_DEVICE")
        devices = os.environ.get("HARNESS_KILL_DEVICES", "")
        if (device is not None and A.shape[0] == int(os.environ.get("HARNESS_KILL_M", "-1"))
                and (not devices or device in devices.split(","))):
            once = os.environ.get("HARNESS_KILL_ONCE")
            if once:
                try:
                    Path(once).touch(exist_ok=False)
                except FileExistsError:
                    return self.inner.run(prepared, A, out)
            if os.environ.get("HARNESS_KILL_HANG") == "1":
                time.sleep(3600)
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.run(prepared, A, out)


_SWAP = swapped_path(os.environ.get("HARNESS_KILL_PATH", "native_int4"), KillingPath)
_SWAP.__enter__()                      # for the life of the process
