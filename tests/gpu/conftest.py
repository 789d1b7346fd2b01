"""Fixtures for the GPU tests: each skips with the precise reason when its need is unmet.

``cuda_device``: a CUDA device (skip: no CUDA GPU / CPU build of torch).
``ext``: the harness extension, built or loaded (skip: the one-line ``BuildError``).
``marlin_ext``: the extension with quanto's Marlin compiled in (skip: why not).
``gpu_out_dir``: where GPU tests write tables/logs ($HARNESS_GPU_OUT, else a tmp dir).
``corr_inputs``: ``f(case, device) -> (A, C0, pack)`` for the correction-kernel tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def cuda_device() -> torch.device:
    if torch.version.cuda is None:
        pytest.skip(f"torch {torch.__version__} is a CPU build (no CUDA)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def ext(cuda_device):
    from harness.kernels.build import BuildError, extension

    try:
        return extension()
    except BuildError as exc:
        pytest.skip(f"harness extension unavailable: {exc}")


@pytest.fixture(scope="session")
def marlin_ext(ext):
    from harness.kernels.build import build_info

    info = build_info()
    if not ext.has_marlin():
        pytest.skip(f"quanto Marlin not compiled in: {info.marlin_reason if info else 'unknown'}")
    return ext


@pytest.fixture(scope="session")
def gpu_out_dir(tmp_path_factory) -> Path:
    env = os.environ.get("HARNESS_GPU_OUT")
    path = Path(env) if env else tmp_path_factory.mktemp("gpu_out")
    path.mkdir(parents=True, exist_ok=True)
    return path


from harness.kernels.base import FP16_GATE  # noqa: E402
from harness.kernels.registry_load import load_all  # noqa: E402


def strict_gate_deviation(path_name: str, case) -> str | None:
    """Why ``path_name`` may exceed the fp16 gate on ``case``, or None (asks the path)."""
    return load_all().get(path_name).error_bound(case)[1] or None


def gate_for(path_name: str, case) -> float:
    """The rel_err bound a path must meet on ``case`` (``GemmPath.error_bound``)."""
    return load_all().get(path_name).error_bound(case)[0]


def check_gate(acc, path_name: str, case) -> None:
    """Assert the path's bound; a Marlin case above the fp16 gate is xfailed with its value."""
    assert acc.nonfinite == 0, acc
    assert acc.passes(gate_for(path_name, case)), acc
    why = strict_gate_deviation(path_name, case)
    if why and path_name != "tinygemm" and not acc.passes(FP16_GATE):
        pytest.xfail(f"rel_err={acc.rel_err:.2e} > {FP16_GATE:g}: {why}")


@pytest.fixture(scope="session")
def gates():
    """(gate_for, check_gate, FP16_GATE) for the test modules."""
    return gate_for, check_gate, FP16_GATE


@pytest.fixture(scope="session")
def corr_inputs():
    """``f(case, device)``: the case's A, a Marlin-like output C0 (half of A @ W) and the
    asymmetric Marlin pack (formula q_minus_8), all on ``device``."""
    from harness.cases.data import case_data
    from harness.kernels.marlin.pack import marlin_pack_asymmetric

    def make(case, device):
        data = case_data(case)
        w = data.weight.to(device)
        pack = marlin_pack_asymmetric(w, formula="q_minus_8")
        A = data.A.to(device)
        C0 = (A.float() @ w.dequantize(torch.float32) * 0.5).half()
        return A, C0, pack

    return make

