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
