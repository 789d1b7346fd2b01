"""GPU tests of the ``rmw`` floor (marker ``gpu``; each test skips with its reason when
there is no GPU, no build or no quanto Marlin): Marlin + one kernel that reads every
element of C and writes it back unchanged leaves C bit for bit Marlin's own output,
eagerly and replayed from a CUDA graph, and has no correction of its own to run alone.

Marlin takes N % 128 == 0 only and writes C with 16-byte stores, so through the harness C
is always 16-byte aligned with M * N a multiple of 8: the kernel's half2 / single-half
fallbacks and its tail (correction_variant_floor.cu) cannot be reached from here. The
graph capture of every floor beside the other variants is in test_correction_variants.py.
"""

from __future__ import annotations

import pytest
import torch

from harness.cases.data import quantize_asymmetric
from harness.kernels.marlin import variants as cv
from harness.kernels.marlin.asym import MarlinAsymPath

pytestmark = pytest.mark.gpu

#: (M, N, K, group size): decode and mid sizes, per-row and g128, one and several chunks of
#: the kernel (256 threads x 4 vectors = 8192 halves), a last chunk partly past C (M40).
SHAPES = ((1, 256, 1024, 128), (3, 512, 2048, 2048), (16, 2048, 1024, 128),
          (40, 768, 2048, 128), (100, 8192, 2048, 128))


def _bits(t):
    return t.view(torch.int16)


@pytest.fixture(scope="module")
def problems(marlin_ext, cuda_device):
    gen = torch.Generator(device=cuda_device).manual_seed(21)
    out = {}
    for M, N, K, gs in SHAPES:
        w = quantize_asymmetric(torch.randn(K, N, device=cuda_device, generator=gen) * 0.02, gs)
        prepared = MarlinAsymPath(variant="two_kernel").prepare(w, cuda_device)
        A = torch.randn(M, K, device=cuda_device, generator=gen).half()
        out[(M, N, K, gs)] = (prepared, A)
    return out


def _run(variant, prepared, A, out):
    path = MarlinAsymPath()
    if variant == "marlin_only":
        path.run_marlin_only(prepared, A, out)
    else:
        path.run_variant(prepared, A, out, variant)
    return out


def _poison(A, prepared):
    return torch.full((A.shape[0], prepared.N), float("nan"), dtype=torch.float16,
                      device=A.device)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}-N{}-K{}-g{}".format(*s))
def test_rmw_leaves_marlins_output_bit_for_bit(shape, problems):
    prepared, A = problems[shape]
    marlin = _run("marlin_only", prepared, A, _poison(A, prepared))
    rmw = _run("rmw", prepared, A, _poison(A, prepared))
    torch.cuda.synchronize()
    assert bool(torch.isfinite(marlin).all()), "Marlin left unwritten elements"
    assert torch.equal(_bits(rmw), _bits(marlin))


@pytest.mark.parametrize("shape", SHAPES[::2], ids=lambda s: "M{}-N{}-K{}-g{}".format(*s))
def test_rmw_replayed_from_a_cuda_graph_keeps_the_bits(shape, problems):
    prepared, A = problems[shape]
    marlin = _run("marlin_only", prepared, A, _poison(A, prepared))
    out = _poison(A, prepared)
    _run("rmw", prepared, A, out)                      # outside the capture first
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _run("rmw", prepared, A, out)
    for _ in range(2):                                 # a replay, not a stale result
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(_bits(out), _bits(marlin))


def test_rmw_has_no_correction_to_run_alone(ext, cuda_device):
    A = torch.randn(2, 1024, device=cuda_device).half()
    C = torch.zeros(2, 256, dtype=torch.float16, device=cuda_device)
    with pytest.raises(RuntimeError, match=r"no correction of its own \(.*rmw\)"):
        ext.correction_variant(A, C, torch.ones(8, 256, device=cuda_device), cv.ext_id("rmw"))
    torch.cuda.synchronize()                           # no sticky error left behind
