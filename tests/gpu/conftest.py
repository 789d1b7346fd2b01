"""Fixtures for the GPU tests: each skips with the precise reason when its need is unmet.

``cuda_device``: a CUDA device (skip: no CUDA GPU / CPU build of torch).
``ext``: the harness extension, built or loaded (skip: the one-line ``BuildError``).
``marlin_ext``: the extension with quanto's Marlin compiled in (skip: why not).
``gpu_out_dir``: where GPU tests write tables/logs ($HARNESS_GPU_OUT, else a tmp dir).
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


#: The fp16 accuracy gate (mean|C - ref| / mean|ref| against fp64 on the dequantized weight).
FP16_GATE = 1e-3
#: bf16 paths (tinygemm): bf16 operands land between 1e-3 and 1e-2; reported, gated loosely.
BF16_GATE = 1e-2
#: Marlin's kernel splits K across thread blocks and reduces the partial sums through C in
#: FP16 ("global_reduce": fp32 adds, fp16 stores), one rounding per block of a column
#: slice. Measured on an H200 (132 SMs): marlin_asym 4.5e-4 (K=256) .. 1.37e-3 (M31 N1024
#: K4096), fused-zero 3e-4 .. 7.7e-4, where one rounding of Marlin's output gives 4.9e-4 /
#: 2.6e-4 (CPU model). The correction amplifies it: |C_marlin| ~ 1.75 |C|. A documented
#: bound for Marlin paths; cases above the fp16 gate are reported as xfail with the value.
MARLIN_SPLIT_K_BOUND = 2.5e-3
#: quanto's per-column Marlin (groupsize -1) computes q * s with UNSHIFTED codes 0..15 and
#: rounds the sum to fp16 before scaling: |sum a*q| ~ 4 |C|. Measured 1.9e-3 .. 6.6e-3 on
#: an H200 (CPU model of one rounding: 1.4e-3 .. 2.2e-3; upstream's (q - 8) * s: ~4e-4).
QUANTO_PER_COLUMN_BOUND = 1.2e-2


def strict_gate_deviation(path_name: str, per_row: bool) -> str | None:
    """Why ``path_name`` may exceed the fp16 gate on this kind of case, or None."""
    if path_name == "tinygemm":
        return f"bf16 path: gated at {BF16_GATE:g}, not the fp16 gate"
    if path_name not in ("marlin_asym", "marlin_fused_zero"):
        return None
    if path_name == "marlin_asym" and per_row:
        from harness.kernels.marlin_providers import get_provider

        if get_provider().formula(-1) == "q_times_s":
            return ("quanto per-column Marlin accumulates unshifted codes (q*s) and rounds the sum "
                    f"to fp16 before scaling (bound {QUANTO_PER_COLUMN_BOUND:g})")
    return ("Marlin's split-K partial sums are reduced through fp16 C (one rounding per block "
            f"of a slice), amplified by the correction (bound {MARLIN_SPLIT_K_BOUND:g})")


def gate_for(path_name: str, per_row: bool) -> float:
    """The rel_err bound a path must meet on a case (see ``strict_gate_deviation``)."""
    why = strict_gate_deviation(path_name, per_row)
    if why is None:
        return FP16_GATE
    if path_name == "tinygemm":
        return BF16_GATE
    return QUANTO_PER_COLUMN_BOUND if "per-column" in why else MARLIN_SPLIT_K_BOUND


def check_gate(acc, path_name: str, per_row: bool) -> None:
    """Assert the path's bound; a Marlin case above the fp16 gate is xfailed with its value."""
    assert acc.nonfinite == 0, acc
    assert acc.passes(gate_for(path_name, per_row)), acc
    why = strict_gate_deviation(path_name, per_row)
    if why and path_name != "tinygemm" and not acc.passes(FP16_GATE):
        pytest.xfail(f"rel_err={acc.rel_err:.2e} > {FP16_GATE:g}: {why}")


@pytest.fixture(scope="session")
def gates():
    """(gate_for, check_gate, FP16_GATE) for the test modules."""
    return gate_for, check_gate, FP16_GATE
