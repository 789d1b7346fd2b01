"""The example paths against the float64 reference on the dequantized weights.

    python -m pytest examples/plugins/tests        (from the harness's checkout)

``torch_dequant`` runs on the CPU (and a GPU when there is one); ``triton_int4`` needs a
CUDA GPU and triton, or runs its kernel in Triton's interpreter on the CPU with
``TRITON_INTERPRET=1`` (slow: small shapes only); otherwise its tests skip with the reason.
"""

from __future__ import annotations

import os

import pytest
import torch
from int4_example.torch_dequant import TorchDequantPath
from int4_example.triton_int4 import TritonInt4Path, int4_matmul, pack, triton

from harness.cases.data import case_weight, generate_activations
from harness.kernels.reference import reference_fp64

SHAPES = [(1, 256, 512, 128), (16, 256, 512, 512), (33, 128, 256, 128)]   # M, N, K, group


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.double().cpu()
    assert torch.isfinite(out).all(), "non-finite output"
    return float((out - ref).abs().mean() / ref.abs().mean())


def _inputs(M, N, K, gs, device):
    w = case_weight(N, K, gs, seed=3)
    A = generate_activations(M, K, seed=4)
    return A.to(device), w.to(device), reference_fp64(A, w)


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("M, N, K, gs", SHAPES)
def test_torch_dequant_matches_the_fp64_reference(device, M, N, K, gs):
    path = TorchDequantPath()
    A, w, ref = _inputs(M, N, K, gs, device)
    out = torch.full((M, N), float("nan"), dtype=torch.float16, device=device)
    path.run(path.prepare(w, torch.device(device)), A, out)
    assert _rel_err(out, ref) < 1e-3


def test_pack_keeps_every_code():
    q = torch.randint(0, 16, (64, 24), dtype=torch.uint8)
    p = pack(q)
    assert p.shape == (32, 24)
    assert torch.equal(p & 0xF, q[0::2]) and torch.equal(p >> 4, q[1::2])


def _triton_device() -> str:
    if triton is None:
        pytest.skip("triton is not installed")
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"                    # the kernel in Triton's interpreter
    pytest.skip("no CUDA GPU (set TRITON_INTERPRET=1 to run the kernel in the interpreter)")


@pytest.mark.parametrize("M, N, K, gs", SHAPES)
def test_the_triton_kernel_matches_the_fp64_reference(M, N, K, gs):
    device = _triton_device()
    A, w, ref = _inputs(M, N, K, gs, device)
    out = torch.full((M, N), float("nan"), dtype=torch.float16, device=device)
    int4_matmul(A, pack(w.q), w.scale, w.zero, gs, out)
    assert _rel_err(out, ref) < 1e-3
    again = torch.full_like(out, float("nan"))
    int4_matmul(A, pack(w.q), w.scale, w.zero, gs, again)
    assert torch.equal(out, again)          # no split-K: the same bits every time


def test_the_triton_path_says_why_it_cannot_run():
    path = TritonInt4Path()
    reason = path.unavailable_reason(torch.device("cpu"))
    assert reason and ("triton" in reason or "CUDA" in reason)
