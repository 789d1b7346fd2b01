"""Shared fixtures of the CPU suite."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread per test: with `-n 2` on a 2-core runner, a 2-thread matmul
    stalls for milliseconds, which makes the CPU-timed tests flaky."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def scratch_paths(monkeypatch):
    """The built-in paths registered, in a copy of the registry this test may change (a
    plugin it runs adds or swaps paths there; the next test sees the registry as it was)."""
    from harness.kernels.base import PATHS  # heavy: torch (the path contract)
    from harness.kernels.registry_load import load_all  # heavy: torch (every path)

    load_all()
    monkeypatch.setattr(PATHS, "_paths", dict(PATHS._paths))
    return PATHS
