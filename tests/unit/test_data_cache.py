"""The disk cache of case data (``harness.cases.data_cache``): what it serves is the bits
the generator makes, a damaged entry is made again, off means off, and a cache that
cannot be written costs nothing but time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.cases import data as D
from harness.cases.data_cache import ENV, arrays_digest, cache_root, cached_arrays

SHAPE = (256, 512, 128, 3)   # N, K, group_size, seed


def _fresh(monkeypatch, root):
    monkeypatch.setenv(ENV, str(root))
    D.case_weight.cache_clear()
    D._case_activations.cache_clear()


def _weight():
    return D.case_weight(*SHAPE)


def _generated():
    w = D.quantize_asymmetric(D.generate_weight(256, 512, 3), 128)
    return w.q, w.scale, w.zero


def _same(qw, ref) -> bool:
    return all(torch.equal(a, b) for a, b in zip((qw.q, qw.scale, qw.zero), ref, strict=True))


def test_a_second_process_is_served_from_disk_bit_for_bit(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    ref = _generated()
    assert _same(_weight(), ref)
    assert len(list(tmp_path.glob("weight-256-512-128-3-*.npz"))) == 1
    D.case_weight.cache_clear()                           # a new process: memory is empty
    monkeypatch.setattr(D, "generate_weight", lambda *a: pytest.fail("regenerated"))
    assert _same(_weight(), ref)
    A = D._case_activations(16, 512, 3)
    D._case_activations.cache_clear()
    assert torch.equal(D._case_activations(16, 512, 3), A)
    assert A.dtype == torch.float16 and A.shape == (16, 512)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "tampered"])
def test_a_damaged_entry_is_made_again(tmp_path, monkeypatch, damage):
    _fresh(monkeypatch, tmp_path)
    ref = _generated()
    _weight()
    (path,) = tmp_path.glob("weight-*.npz")
    if damage == "garbage":
        path.write_bytes(b"not an npz")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    else:                                                 # valid npz, one code changed
        with np.load(path) as z:
            arrays = {k: z[k].copy() for k in z.files}
        arrays["q"][0, 0] ^= 1
        np.savez(path, **arrays)
    D.case_weight.cache_clear()
    assert _same(_weight(), ref)
    with np.load(path) as z:                              # and the entry is whole again
        assert str(z["_sha256"]) == arrays_digest({k: z[k] for k in z.files if k != "_sha256"})


def test_off_writes_nothing_and_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    for off in ("0", "off", "None"):
        monkeypatch.setenv(ENV, off)
        assert cache_root() is None
    _fresh(monkeypatch, "0")
    assert _same(_weight(), _generated())
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    _fresh(monkeypatch, blocker / "cache")                # its parent is a file
    assert _same(_weight(), _generated())


def test_another_version_key_is_another_entry(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path))
    calls = []

    def make():
        calls.append(1)
        return {"x": np.arange(4)}

    cached_arrays("item", (1,), "v1", make)
    cached_arrays("item", (1,), "v1", make)
    cached_arrays("item", (1,), "v2", make)
    assert len(calls) == 2 and len(list(tmp_path.glob("item-1-*.npz"))) == 2


def test_the_default_root_is_beside_the_build_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == tmp_path / ".cache" / "int4-harness" / "data"
