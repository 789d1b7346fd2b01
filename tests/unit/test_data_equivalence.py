"""``engines/bench_data.py``: the earlier generators it lets read this checkout's cached
case data give the same bits, and use the same cache files; the key it computes is
``data.VERSION_KEY``; it acts on a listed source only."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.cases import GemmCase, data_cache
from harness.cases import data as current
from harness.engines import bench_data
from harness.engines.bench_runner import DATA_PLUGIN, BenchRequest, SubprocessRunner

ROOT = Path(__file__).resolve().parents[2]


def _git_blob(blob: str) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "cat-file", "blob", blob],
                              capture_output=True, check=False)
    except OSError:
        pytest.skip("git is not installed")
    if done.returncode != 0:
        pytest.skip(f"blob {blob[:12]} is not in this clone (a shallow clone?)")
    return done.stdout


def _load(source: bytes, name: str, folder: Path) -> types.ModuleType:
    """An earlier data.py as a module of the package ``harness.cases`` (its relative
    imports resolve there), its ``__file__`` a copy of the source (its key hashes it)."""
    path = folder / f"{name}.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(f"harness.cases.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def test_the_plugin_computes_this_checkouts_key():
    assert bench_data.current_key(np.__version__, torch.__version__) == current.VERSION_KEY


@pytest.mark.parametrize("blob", sorted(bench_data.SAME_BITS))
def test_each_listed_generator_gives_the_same_bits(blob, tmp_path, monkeypatch):
    monkeypatch.setenv(data_cache.ENV, "0")
    old = _load(_git_blob(blob), f"_same_bits_{blob[:12]}", tmp_path)
    assert bench_data.blob_id(Path(old.__file__).read_bytes()) == blob
    for n, k, seed, stream in [(256, 128, 1, 1), (256, 128, 1, 3), (129, 3, 4, 1),
                               (1000, 64, 7, 1), (2048, 256, 0, 3)]:
        a, b = old.generate_weight(n, k, seed, stream), current.generate_weight(n, k, seed, stream)
        assert torch.equal(a.view(torch.int32), b.view(torch.int32)), (n, k, seed, stream)
    for m, k, seed in [(1, 256, 0), (5, 128, 7), (33, 1000, 2)]:
        a, b = old.generate_activations(m, k, seed), current.generate_activations(m, k, seed)
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), (m, k, seed)
    for case in [GemmCase(M=5, N=256, K=512, group_size=128, seed=3),
                 GemmCase(M=16, N=128, K=256, group_size=256, seed=1, kind="swiglu_pair")]:
        a, b = old.case_data(case), current.case_data(case)
        assert torch.equal(a.A, b.A) and len(a.weights) == len(b.weights)
        for wa, wb in zip(a.weights, b.weights, strict=True):
            assert torch.equal(wa.q, wb.q) and torch.equal(wa.scale, wb.scale)
            assert torch.equal(wa.zero, wb.zero)


@pytest.mark.parametrize("blob", sorted(bench_data.SAME_BITS))
def test_a_listed_generator_reads_and_writes_this_checkouts_cache(blob, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv(data_cache.ENV, str(tmp_path / "cache"))
    current.case_weight.cache_clear()     # in memory from an earlier test: not in this cache
    current._case_activations.cache_clear()
    old = _load(_git_blob(blob), f"_same_cache_{blob[:12]}", tmp_path)
    assert old.VERSION_KEY != current.VERSION_KEY
    assert bench_data.adopt(old) and old.VERSION_KEY == current.VERSION_KEY
    # written by this checkout, read by the old code (no generation: make() must not run)
    w = current.case_weight(384, 256, 128, 11)
    got = old.cached_arrays("weight", (384, 256, 128, 11, 0, 1), old.VERSION_KEY,
                            lambda: pytest.fail("the old code generated instead of reading"))
    assert np.array_equal(got["q"], w.q.numpy()) and np.array_equal(got["zero"], w.zero.numpy())
    # written by the old code, read by this checkout
    a_old = old._case_activations(7, 320, 5)
    got = data_cache.cached_arrays("activations", (7, 320, 5), current.VERSION_KEY,
                                   lambda: pytest.fail("this checkout generated instead"))
    assert np.array_equal(got["A"], a_old.numpy())


def test_the_plugin_leaves_other_sources_alone(tmp_path):
    other = tmp_path / "data.py"
    other.write_text("VERSION_KEY = 'mine'\n")
    module = types.SimpleNamespace(__file__=str(other), VERSION_KEY="mine")
    assert not bench_data.adopt(module) and module.VERSION_KEY == "mine"
    assert not bench_data.adopt(current)                  # this checkout's own: unchanged
    assert not bench_data.adopt(types.SimpleNamespace())  # no file: nothing done


def test_every_bench_the_runner_starts_gets_the_plugin_first(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr("harness.engines.bench_runner.bench_command",
                        lambda req: seen.append(req.plugins) or [sys.executable, "-c", ""])
    runner = SubprocessRunner()
    req = BenchRequest("A", "rev", tmp_path, tmp_path / "out", "smoke", 0,
                       plugins=("mine.py",), rows=(("c", "p"),))
    runner.finish(runner.start(req))
    runner(req)
    assert [p[0] for p in seen] == [str(DATA_PLUGIN)] * 2
    assert seen[0][1].endswith("bench_gate.py") and seen[0][2] == "mine.py"
    assert seen[1][1] == "mine.py" and seen[0][-1].endswith("bench_rows.py")
