"""The real model's GGUF in parts for an offline GPU machine (issue 39, docs/perplexity.md
§7): split, carried, joined in order and checked against the file's SHA-256, then found
through ``HARNESS_MODEL_DIR`` without the model's package."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest

from harness.model import real

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gguf_parts  # noqa: E402

needs_readers = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in real.READERS),
    reason="the realmodel extra (gguf, accelerate, transformers) is not installed")


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    data = bytes(range(256)) * 1001 + b"tail"          # not a multiple of the part count
    spec = real.RealModelSpec("no_such_package", "fake.gguf", "no-such-package==0",
                              hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(real.MODELS, "fake", spec)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "fake.gguf").write_bytes(data)
    monkeypatch.setenv(real.MODEL_DIR_ENV, str(tmp_path / "src"))
    return data


@needs_readers
def test_split_and_join_give_the_file_back(fake_model, tmp_path, monkeypatch, capsys):
    assert gguf_parts.main(["split", "fake", "--out", str(tmp_path / "parts"),
                            "--parts", "3"]) == 0
    parts = sorted((tmp_path / "parts").glob("part-*"))
    assert len(parts) == 3 and sum(p.stat().st_size for p in parts) == len(fake_model)
    assert gguf_parts.main(["join", "fake", *map(str, parts), "--out",
                            str(tmp_path / "model")]) == 0
    assert (tmp_path / "model" / "fake.gguf").read_bytes() == fake_model
    monkeypatch.setenv(real.MODEL_DIR_ENV, str(tmp_path / "model"))
    assert real.gguf_path("fake") == tmp_path / "model" / "fake.gguf"   # no package needed
    capsys.readouterr()
    # out of order: the digest says so in one line, nothing written
    assert gguf_parts.main(["join", "fake", *map(str, parts[::-1]), "--out",
                            str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert "sha256" in err and "\n" not in err and not (tmp_path / "bad").exists()
    assert gguf_parts.main(["join", "fake", str(tmp_path / "nope"), "--out",
                            str(tmp_path / "bad")]) == 2
    assert "missing part" in capsys.readouterr().err


@needs_readers
def test_a_model_dir_without_the_file_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(real.MODEL_DIR_ENV, str(tmp_path))
    with pytest.raises(real.RealModelError, match="no SmolLM2-135M-Instruct.Q4_1.gguf there"):
        real.gguf_path("smollm2")


def test_the_recorded_digest_is_the_installed_files():
    try:
        path = real.gguf_path("smollm2")
    except real.RealModelError as exc:
        pytest.skip(f"the model package is not installed: {exc}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == real.MODELS["smollm2"].sha256
