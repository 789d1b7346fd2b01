"""Marlin packing: hand-derived words, round trips, scale permutations, validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.cases.data import QuantizedWeight, case_weight, quantize_asymmetric
from harness.cases.registry import MATRICES
from harness.kernels.marlin.pack import (
    MarlinPack,
    marlin_groupsize,
    marlin_pack_asymmetric,
    marlin_pack_symmetric,
    pack_codes,
    permute_scales,
    unpack_codes,
    unpermute_scales,
)


def i32(word: int) -> int:
    """An unsigned 32-bit literal as the int32 value torch stores."""
    return word - (1 << 32) if word >= 1 << 31 else word


def block(fn, K=16, N=64) -> torch.Tensor:
    k = torch.arange(K)[:, None]
    n = torch.arange(N)[None, :]
    return fn(k, n).expand(K, N).to(torch.uint8).contiguous()


# --------------------------------------------------------------------------- by hand
# Lane L of word 4L + t (tile t of the 16x64 block) holds column c = L//4 (half 0) and
# c + 8 (half 1), rows r = 2(L%4), r+1, r+8, r+9. After the [0,2,4,6,1,3,5,7] interleave
# nibbles 0..7 are: (r,h0) (r+8,h0) (r,h1) (r+8,h1) (r+1,h0) (r+9,h0) (r+1,h1) (r+9,h1).

def test_words_of_row_index_pattern():
    B = pack_codes(block(lambda k, n: k))   # code = row k
    assert B.shape == (1, 128) and B.dtype == torch.int32
    # lane 0, rows 0,1,8,9: nibbles 0,8,0,8,1,9,1,9 -> 0x91918080 (any tile)
    assert B[0, 0].item() == i32(0x91918080)
    assert B[0, 3].item() == i32(0x91918080)
    # lane 5, rows 2,3,10,11: nibbles 2,10,2,10,3,11,3,11 -> 0xB3B3A2A2
    assert B[0, 4 * 5 + 2].item() == i32(0xB3B3A2A2)


def test_words_of_column_index_pattern():
    B = pack_codes(block(lambda k, n: n % 16))   # code = column inside the tile
    # lane 0: columns 0 and 8 -> nibbles 0,0,8,8,0,0,8,8 -> 0x88008800
    assert B[0, 0].item() == i32(0x88008800)
    # lane 5: columns 1 and 9 -> 0x99119911; lane 31: columns 7 and 15 -> 0xFF77FF77
    assert B[0, 4 * 5 + 1].item() == i32(0x99119911)
    assert B[0, 4 * 31 + 3].item() == i32(0xFF77FF77)


def test_words_of_tile_index_pattern():
    B = pack_codes(block(lambda k, n: n // 16))  # code = tile 0..3
    assert B[0, 4 * 5 + 2].item() == 0x22222222
    assert B[0, 4 * 31 + 3].item() == 0x33333333
    assert B[0, 4 * 17 + 0].item() == 0


def test_mixed_pattern_words():
    # q = (k + 2n) % 16. Lane 0 tile 0: (0,0)=0 (8,0)=8 (0,8)=0 (8,8)=8 (1,0)=1 (9,0)=9
    # (1,8)=1 (9,8)=9 -> 0x91918080. Lane 6 tile 1 (c=1, r=4, n=17 and 25):
    # (4,17)=6 (12,17)=14 (4,25)=6 (12,25)=14 (5,17)=7 (13,17)=15 (5,25)=7 (13,25)=15
    # -> 0xF7F7E6E6
    B = pack_codes(block(lambda k, n: (k + 2 * n) % 16))
    assert B[0, 0].item() == i32(0x91918080)
    assert B[0, 4 * 6 + 1].item() == i32(0xF7F7E6E6)


@pytest.mark.parametrize("k,n,code,word,value", [
    (0, 0, 1, 0, 1),                       # lane 0, tile 0, nibble 0
    (9, 13, 1, 80, 1 << 28),               # col 5 half 1 row 9: lane 20, nibble 7
    (2, 40, 1, 6, 1 << 8),                 # tile 2, col 0 half 1 row 2: lane 1, nibble 2
    (15, 63, 15, 127, i32(0xF0000000)),    # lane 31 tile 3 nibble 7, sign bit set
    (8, 3, 5, 4 * 12, 5 << 4),             # col 3 half 0 row 8: lane 12, nibble 1
])
def test_one_hot_positions(k, n, code, word, value):
    q = torch.zeros(16, 64, dtype=torch.uint8)
    q[k, n] = code
    B = pack_codes(q)[0]
    expected = torch.zeros(128, dtype=torch.int32)
    expected[word] = value
    assert torch.equal(B, expected)


def test_tiles_row_major_by_k_then_64_column_blocks():
    # K=32, N=128: code 8*kt + nt identifies the 16x16 tile. Row kt of B holds the 16x64
    # blocks of that k-tile one after the other: word w -> nt = 4 * (w // 128) + w % 4.
    q = block(lambda k, n: 8 * (k // 16) + n // 16, K=32, N=128)
    B = pack_codes(q)
    assert B.shape == (2, 256)
    for kt in range(2):
        for w in (0, 1, 2, 3, 77, 128, 129, 254, 255):
            t = 8 * kt + 4 * (w // 128) + w % 4
            assert B[kt, w].item() == i32(int(f"{t:x}" * 8, 16)), (kt, w)


# --------------------------------------------------------------------------- round trips
def _distinct_weights(matrix: str):
    seen = {}
    for c in MATRICES.cases(matrix):
        seen.setdefault((c.N, c.K, c.group_size, c.seed), c)
    return sorted(seen)


@pytest.mark.parametrize("key", _distinct_weights("parity"),
                         ids=lambda k: "N{}-K{}-g{}-s{}".format(*k))
def test_round_trip_parity(key):
    w = case_weight(*key)
    B = pack_codes(w.q)
    assert torch.equal(unpack_codes(B, w.K, w.N), w.q)
    pack = marlin_pack_asymmetric(w)
    expected = torch.where(w.expand(w.scale) == 0, torch.full_like(w.q, 8), w.q)
    assert torch.equal(unpack_codes(pack.B, w.K, w.N), expected)
    assert torch.equal(unpermute_scales(pack.scales), w.scale)


@pytest.mark.slow
def test_round_trip_production():
    keys = _distinct_weights("production")
    assert len(keys) == 8
    for key in keys:
        w = case_weight(*key)
        assert torch.equal(unpack_codes(pack_codes(w.q), w.K, w.N), w.q), key


def test_round_trip_random_codes_every_nibble_value():
    g = torch.Generator().manual_seed(7)
    q = torch.randint(0, 16, (48, 192), generator=g, dtype=torch.uint8)
    B = pack_codes(q)
    assert (B < 0).any()  # top nibbles >= 8 land in the sign bit
    assert torch.equal(unpack_codes(B, 48, 192), q)
    assert torch.equal(pack_codes(q.to(torch.int64)), B)


# --------------------------------------------------------------------------- scales
def test_scale_permutation_grouped_by_hand():
    s = torch.arange(128, dtype=torch.float16).reshape(2, 64)
    p = permute_scales(s)
    assert p[0, :16].tolist() == [0, 8, 16, 24, 32, 40, 48, 56, 1, 9, 17, 25, 33, 41, 49, 57]
    assert p[1, :8].tolist() == [64 + 8 * j for j in range(8)]
    assert torch.equal(unpermute_scales(p), s)


def test_scale_permutation_per_column_by_hand():
    s = torch.arange(64, dtype=torch.float16).reshape(1, 64)
    p = permute_scales(s)
    assert p[0, :32].tolist() == [0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19, 26, 27,
                                  4, 5, 12, 13, 20, 21, 28, 29, 6, 7, 14, 15, 22, 23, 30, 31]
    assert p[0, 32:34].tolist() == [32, 33]
    assert torch.equal(unpermute_scales(p), s)


@pytest.mark.parametrize("G,N", [(1, 64), (1, 384), (3, 128), (16, 2048)])
def test_scale_round_trip(G, N):
    s = torch.randn(G, N, generator=torch.Generator().manual_seed(G * N)).half()
    p = permute_scales(s)
    assert not torch.equal(p, s)
    assert torch.equal(unpermute_scales(p), s)
    assert torch.equal(permute_scales(unpermute_scales(s)), s)


# --------------------------------------------------------------------------- packs
def test_symmetric_pack_codes_and_zero_scale():
    scale = torch.tensor([[0.5] * 63 + [0.0]], dtype=torch.float16).repeat(2, 1)  # G=2, gs=8
    q = torch.randint(0, 16, (16, 64), generator=torch.Generator().manual_seed(3),
                      dtype=torch.uint8)
    w = (q.float() - 8) * scale.float().repeat_interleave(8, 0)
    w[:, 63] = 123.0                          # any value: scale 0 -> code 8
    w[0, 0], w[1, 0] = 100.0, -100.0          # clamped to 15 and 0
    B, s = marlin_pack_symmetric(w, scale, 8)
    codes = unpack_codes(B, 16, 64)
    assert codes[0, 0] == 15 and codes[1, 0] == 0
    assert (codes[:, 63] == 8).all()
    assert torch.equal(codes[2:, :63], q[2:, :63])
    assert torch.equal(unpermute_scales(s), scale)


def test_asymmetric_pack_fields_and_delta():
    w = quantize_asymmetric(torch.randn(256, 128, generator=torch.Generator().manual_seed(5)), 128)
    p8 = marlin_pack_asymmetric(w, "q_minus_8")
    pq = marlin_pack_asymmetric(w, "q_times_s")
    assert isinstance(p8, MarlinPack)
    assert (p8.K, p8.N, p8.group_size, p8.marlin_groupsize, p8.groups) == (256, 128, 128, 128, 2)
    assert p8.delta.dtype == torch.float32 and p8.delta.shape == (2, 128)
    assert torch.equal(p8.delta.double(), w.zero.double() + 8 * w.scale.double())
    assert torch.equal(pq.delta.double(), w.zero.double())
    assert torch.equal(unpermute_scales(p8.sz), -8 * w.scale)
    assert torch.equal(p8.B, pq.B)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p8.formula = "q_times_s"


def test_pack_record_rejects_inconsistent_fields():
    w = quantize_asymmetric(torch.randn(128, 64, generator=torch.Generator().manual_seed(9)), 64)
    p = marlin_pack_asymmetric(w)
    assert dataclasses.replace(p, sz=None).sz is None
    with pytest.raises(ValueError, match="^formula:"):
        dataclasses.replace(p, formula="fused")
    with pytest.raises(ValueError, match="^delta: must be torch.float32"):
        dataclasses.replace(p, delta=p.delta.double())
    with pytest.raises(ValueError, match="^B: must be torch.int32"):
        dataclasses.replace(p, B=p.B[:, :64])
    with pytest.raises(ValueError, match="^marlin_groupsize:"):
        dataclasses.replace(p, marlin_groupsize=-1)     # -1 only for per-row weights


def test_per_row_pack_uses_minus_one_and_single_scale_order():
    w = quantize_asymmetric(torch.randn(128, 64, generator=torch.Generator().manual_seed(6)), 128)
    p = marlin_pack_asymmetric(w)
    assert p.group_size == 128 and p.marlin_groupsize == -1
    assert p.scales[0, 2] == w.scale[0, 8]    # per-column order: [0, 1, 8, 9, ...]


def test_marlin_groupsize_translation():
    assert marlin_groupsize(2048, 2048) == -1
    assert marlin_groupsize(128, 2048) == 128
    assert marlin_groupsize(2048, 2048, translate=False) == 2048   # the seed's planted defect


# --------------------------------------------------------------------------- validation
def _weight(K=32, N=64, gs=16, **kw):
    G = K // gs
    args = dict(q=torch.zeros(K, N, dtype=torch.uint8), scale=torch.ones(G, N, dtype=torch.float16),
                zero=torch.zeros(G, N, dtype=torch.float16), group_size=gs)
    args.update(kw)
    return QuantizedWeight(**args)


@pytest.mark.parametrize("call,field", [
    (lambda: pack_codes(torch.zeros(24, 64, dtype=torch.uint8)), "q: K=24"),
    (lambda: pack_codes(torch.zeros(16, 96, dtype=torch.uint8)), "q: N=96"),
    (lambda: pack_codes(torch.full((16, 64), 16, dtype=torch.uint8)), "q: codes"),
    (lambda: pack_codes(torch.full((16, 64), -1, dtype=torch.int32)), "q: codes"),
    (lambda: pack_codes(torch.zeros(16, 64)), "q: must be an integer"),
    (lambda: unpack_codes(torch.zeros(1, 64, dtype=torch.int32), 16, 64), "packed: shape"),
    (lambda: unpack_codes(torch.zeros(1, 128, dtype=torch.int64), 16, 64),
     "packed: must be an int32"),
    (lambda: permute_scales(torch.zeros(2, 96, dtype=torch.float16)), "scales: N=96"),
    (lambda: marlin_pack_symmetric(torch.zeros(32, 64), torch.ones(2, 64), 16),
     "scale: must be a float16"),
    (lambda: marlin_pack_symmetric(torch.zeros(32, 64), torch.ones(1, 64, dtype=torch.float16), 16),
     "scale: shape"),
    (lambda: marlin_pack_symmetric(torch.zeros(32, 64), torch.ones(2, 64, dtype=torch.float16), 12),
     "group_size: 12"),
    (lambda: marlin_pack_symmetric(torch.zeros(32, 64, dtype=torch.int32),
                                   torch.ones(2, 64, dtype=torch.float16), 16), "w_sym"),
    (lambda: marlin_pack_asymmetric(_weight(), formula="q_plus_8"), "formula"),
    (lambda: marlin_pack_asymmetric(_weight(K=24, gs=8)), "weight: K=24"),
    (lambda: marlin_pack_asymmetric(_weight(q=torch.full((32, 64), 20, dtype=torch.uint8))),
     "weight.q"),
    (lambda: marlin_pack_asymmetric(
        _weight(scale=torch.full((2, 64), 9000.0, dtype=torch.float16))),
     "weight.scale"),
    (lambda: marlin_pack_asymmetric(
        _weight(zero=torch.full((2, 64), float("nan"), dtype=torch.float16))),
     "weight.zero"),
    (lambda: marlin_groupsize(0, 128), "group_size"),
])
def test_invalid_inputs_name_the_field(call, field):
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert "\n" not in msg
    assert field in msg
    assert msg.split(":")[0] == field.split(":")[0]
