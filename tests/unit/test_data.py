"""Deterministic case data and TinyLoop's INT4 quantization."""

import hashlib

import numpy as np
import pytest
import torch

from harness.cases import GemmCase, streams
from harness.cases.data import (
    QuantizedWeight,
    case_data,
    generate_activations,
    generate_weight,
    quantize_asymmetric,
    quantize_symmetric,
)


def _h(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def test_case_data_is_bit_identical_to_the_pinned_digest():
    # Pinned on x86-64 / numpy 2.4 / torch 2.13. The generator uses only raw PCG64 bits and
    # correctly rounded arithmetic, so any IEEE-754 machine must reproduce these digests.
    d = case_data(GemmCase(M=5, N=128, K=256, group_size=64, seed=7))
    assert _h(d.A) == "095b346cc334e53f"
    assert _h(d.weight.q) == "e9e5eedbfc719f07"
    assert _h(d.weight.scale) == "8a4da9d66f907a9e"
    assert _h(d.weight.zero) == "9082d89e144e2d50"


def test_same_seed_same_bits_other_seed_other_bits():
    a = generate_weight(256, 128, seed=1)
    assert torch.equal(a, generate_weight(256, 128, seed=1))
    assert not torch.equal(a, generate_weight(256, 128, seed=2))
    assert not torch.equal(generate_activations(4, 128, 1), generate_activations(4, 128, 2))


def test_uniforms_are_exact_dyadic_values_in_unit_interval():
    u = streams.uniform((1, 2, 3), (1001,))
    assert u.shape == (1001,) and u.min() >= 0.0 and u.max() < 1.0
    assert np.all(u * 2.0 ** 32 == np.floor(u * 2.0 ** 32))


def test_weights_are_heavy_tailed_with_outlier_columns():
    w = generate_weight(1024, 2048, seed=0).double()
    col_std = w.std(dim=0)
    # a few outlier columns, several times the typical column
    assert (col_std > 4 * col_std.median()).sum().item() >= 5
    bulk = w[:, col_std < 2 * col_std.median()]
    z = (bulk - bulk.mean()) / bulk.std()
    kurtosis = (z ** 4).mean().item()
    assert kurtosis > 5.0, kurtosis  # a Gaussian has 3


def test_activations_have_outlier_channels():
    a = generate_activations(64, 4096, seed=0).float()
    ch = a.abs().amax(dim=0)
    assert (ch > 8).sum() >= 5 and a.dtype == torch.float32


@pytest.mark.parametrize("group_size", [64, 256])
def test_asymmetric_quantization_properties(group_size):
    w = generate_weight(256, 256, seed=3)
    qw = quantize_asymmetric(w, group_size)
    assert qw.q.dtype == torch.uint8 and int(qw.q.max()) <= 15
    assert qw.scale.shape == (256 // group_size, 256) and qw.scale.dtype == torch.float16
    deq = qw.dequantize()
    step = qw.expand(qw.scale.double())
    # rounding error at most half a step, plus the fp16 rounding of scale and zero
    err = (deq - w.double()).abs()
    slack = 16 * step * 2.0 ** -11 + qw.expand(qw.zero.double()).abs() * 2.0 ** -11
    assert torch.all(err <= 0.5 * step + slack)
    # min-max: the zero is the group's minimum rounded to fp16
    gmin = w.reshape(-1, group_size, 256).amin(dim=1)
    assert torch.equal(qw.zero, gmin.to(torch.float16))
    # every group uses code 0 and (nearly always) code 15
    codes = qw.q.reshape(-1, group_size, 256)
    assert torch.all(codes.amin(dim=1) == 0)
    assert (codes.amax(dim=1) == 15).float().mean() > 0.95


def test_zero_scale_group_gives_zero_codes():
    w = torch.ones(128, 64)
    qw = quantize_asymmetric(w, 64)
    assert torch.all(qw.scale == 0) and torch.all(qw.q == 0)
    assert torch.equal(qw.dequantize(torch.float32), w)


def test_symmetric_variant_has_zero_minus_8_scale():
    qw = quantize_symmetric(generate_weight(128, 256, seed=5), 128)
    assert qw.symmetric
    assert torch.equal(qw.zero.float(), -8 * qw.scale.float())
    deq = qw.dequantize()
    assert torch.equal(deq, (qw.q.double() - 8) * qw.expand(qw.scale.double()))


def test_dequantize_is_exact_in_fp64():
    qw = quantize_asymmetric(generate_weight(64, 128, seed=2), 32)
    q, s, z = qw.q.double(), qw.expand(qw.scale.double()), qw.expand(qw.zero.double())
    assert torch.equal(qw.dequantize(), q * s + z)
    # the product and sum are exact: recovering q from W is exact too
    assert torch.equal((qw.dequantize() - z) / s, q)


def test_invalid_quantized_weight_raises_naming_the_field():
    q = torch.zeros(128, 64, dtype=torch.uint8)
    s = torch.ones(2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="QuantizedWeight.scale"):
        QuantizedWeight(q, s.float(), s, 64)
    with pytest.raises(ValueError, match="QuantizedWeight.zero"):
        QuantizedWeight(q, s, s[:1], 64)
    with pytest.raises(ValueError, match="QuantizedWeight.q"):
        QuantizedWeight(q.int(), s, s, 64)
    with pytest.raises(ValueError, match="group_size"):
        quantize_asymmetric(torch.zeros(100, 8), 64)


def test_swiglu_pair_has_two_independent_weights():
    d = case_data(GemmCase(M=2, N=256, K=256, group_size=128, kind="swiglu_pair"))
    assert len(d.weights) == 2
    assert not torch.equal(d.weights[0].q, d.weights[1].q)


# -- the chunked generator against the definition -------------------------------------
# The definition, whole arrays: a stream's raw outputs, each split low half then high
# half, the first n halves over 2**32; Irwin-Hall(4) from four consecutive quarters.

def _def_uniform(entropy, shape):
    n = int(np.prod(shape))
    raw = np.random.PCG64(np.random.SeedSequence(list(entropy))).random_raw((n + 1) // 2)
    h = np.empty(2 * raw.size, dtype=np.uint64)
    h[0::2] = raw & np.uint64(0xFFFFFFFF)
    h[1::2] = raw >> np.uint64(32)
    return (h[:n].astype(np.float64) * (1.0 / 4294967296.0)).reshape(shape)


def _def_normalish(entropy, shape):
    u = _def_uniform(entropy, (4,) + tuple(shape))
    return (((u[0] + u[1]) + u[2]) + u[3] - 2.0) * 1.7320508075688772


def _def_weight(N, K, seed, stream=1):
    ent = (1, stream, seed, N, K)
    z = _def_normalish(ent + (0,), (K, N))
    mix = _def_uniform(ent + (1,), (K, N))
    sigma = np.where(mix < 0.90, 1.0, np.where(mix < 0.98, 2.5, 6.0))
    col = _def_uniform(ent + (2,), (N,))
    col_scale = np.ones(N)
    col_scale[np.argsort(col, kind="stable")[:max(1, N // 100)]] = 8.0
    return (z * sigma * col_scale[None, :] * 0.02).astype(np.float32)


def _def_activations(M, K, seed):
    ent = (1, 2, seed, M, K)
    ch_scale = np.where(_def_uniform(ent + (1,), (K,)) < 0.005, 10.0, 1.0)
    return (_def_normalish(ent + (0,), (M, K)) * ch_scale[None, :]).astype(np.float16)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (7, 1), (129, 3), (33, 64), (256, 128)])
def test_chunked_threaded_generation_reproduces_the_definition_bit_for_bit(
        monkeypatch, chunk, shape):
    # chunks of one row up to the whole matrix, odd element counts (a quarter of the stream
    # then starts in the middle of a raw output), several threads
    monkeypatch.setattr(streams, "CHUNK_ELEMS", chunk)
    monkeypatch.setattr(streams, "MAX_THREADS", 3)
    a, b = shape
    w = generate_weight(a, b, seed=5, stream=3).numpy()
    assert np.array_equal(w.view(np.uint32), _def_weight(a, b, 5, 3).view(np.uint32))
    x = generate_activations(a, b, seed=9).numpy()
    assert np.array_equal(x.view(np.uint16), _def_activations(a, b, 9).view(np.uint16))


@pytest.mark.parametrize("start,count", [(0, 1), (1, 1), (1, 4), (6, 3), (999, 2)])
def test_a_span_of_the_stream_is_the_same_span_of_the_whole(start, count):
    whole = _def_uniform((4, 2), (1001,))
    assert np.array_equal(streams.uniform_at((4, 2), start, count), whole[start:start + count])


def test_an_error_in_a_chunk_thread_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(streams, "CHUNK_ELEMS", 2)

    def fill(r0, r1):
        if r0 == 4:
            raise ValueError("chunk 4 failed")
    with pytest.raises(ValueError, match="chunk 4 failed"):
        streams.by_row_chunks(10, 1, fill)
