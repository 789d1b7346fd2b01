"""CPU tests of the perplexity model (issue 6): corpus, fixture, loading errors, paths, dispatch.

The stored expectations are ``harness/model/fixtures/cpu_baseline.json``, written by
``harness.model.ppl.write_cpu_baseline`` (``python -m harness.model.train`` writes it after
training; regenerate it with the command in its ``command`` field whenever the fixture
files change). The fixture's held-out sequence (1025 tokens, 1024 predicted) is scored
through the fp32 reference and the emulated Marlin path for both variants.
"""

from __future__ import annotations

import json
import math
import shutil
from functools import lru_cache

import numpy as np
import pytest
import torch

from harness.cases.data import quantize_asymmetric
from harness.model import corpus
from harness.model.fixture import (
    FIXTURE_DIR,
    META_FILE,
    VARIANTS,
    FixtureError,
    load_fixture,
    pack_nibbles,
    sha256_file,
    unpack_nibbles,
)
from harness.model.ppl import BASELINE_FILE, FixtureSubject, drifts, score_subject
from harness.model.quant_linear import FUSED_REASON, PathUnavailable, QuantLinear, QuantRuntime
from harness.model.transformer import ConfigError, FloatFactory, LoopedConfig, LoopedTransformer


@lru_cache(maxsize=2)
def _fixture(variant: str):
    return load_fixture(variant)


@pytest.fixture(scope="module")
def baseline() -> dict:
    return json.loads((FIXTURE_DIR / BASELINE_FILE).read_text())


def _calls_per_forward(cfg) -> int:
    return 5 * (cfg.pre + cfg.loops)


# --------------------------------------------------------------------------- corpus
def test_corpus_is_deterministic_and_splits_differ():
    a, b = corpus.generate(3000, "train", 0), corpus.generate(3000, "train", 0)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.logp, b.logp)
    h = corpus.generate(3000, "heldout", 0)
    assert not np.array_equal(a.tokens, h.tokens)
    assert a.tokens[0] == corpus.DOC and h.tokens[0] == corpus.DOC
    assert 0 <= a.tokens.min() and a.tokens.max() < corpus.VOCAB_SIZE
    # far more predictable than uniform: the grammar's own perplexity
    assert a.generator_ppl() < corpus.VOCAB_SIZE / 10


def test_corpus_shards_do_not_depend_on_workers():
    one = corpus.sharded_tokens(5000, "train", 0, shard_tokens=2000, workers=1)
    assert one.size == 5000
    assert np.array_equal(one[:2000], corpus.generate(2000, "train", 0, shard=0).tokens)
    assert np.array_equal(one[2000:4000], corpus.generate(2000, "train", 0, shard=1).tokens)


def test_corpus_rejects_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        corpus.generate(10, "test")
    with pytest.raises(ValueError, match="n_tokens"):
        corpus.generate(0)
    assert corpus.detokenize([corpus.DOC, corpus.DOT]) == "<doc> ."


# --------------------------------------------------------------------------- fixture
def test_fixture_is_trained_far_below_uniform():
    fx = _fixture("g128")
    meta = fx.meta
    assert meta["trained_on"] in ("cpu", "cuda")
    assert meta["uniform_ppl"] == fx.config.vocab
    assert meta["float_ppl"] < meta["uniform_ppl"] / 8
    curve = meta["training"]["loss_curve"]
    assert curve[-1][1] < curve[0][1] - 1.0
    for v in VARIANTS:
        assert meta["variants"][v]["reference_ppl"] < meta["uniform_ppl"] / 8
    total = sum((FIXTURE_DIR / meta["variants"][v]["file"]).stat().st_size for v in VARIANTS)
    assert total <= 10 * 2**20


def test_fixture_heldout_is_the_corpus_heldout_split():
    fx = _fixture("g128")
    n = fx.heldout.numel()
    assert n >= 1025
    seq = corpus.generate(n, "heldout", fx.meta["corpus"]["seed"]).tokens
    assert np.array_equal(fx.heldout.numpy(), seq)


def test_fixture_shapes_fit_marlin():
    fx = _fixture("row")
    assert fx.config.d_model % 256 == 0 and fx.config.ffn % 256 == 0
    for name, w in fx.weights.items():
        assert w.K % 128 == 0 and w.N % 256 == 0, name
        assert w.group_size == w.K      # per-row
    assert all(w.group_size == 128 for w in _fixture("g128").weights.values())


def test_baseline_belongs_to_these_fixture_files(baseline):
    for v in VARIANTS:
        sha = sha256_file(FIXTURE_DIR / f"fixture-{v}.safetensors")
        assert baseline["fixture_sha256"][v] == sha, (
            f"{BASELINE_FILE} is stale for {v}; regenerate: {baseline['command']}")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fixture_ppl_matches_cpu_baseline(variant, baseline):
    fx = _fixture(variant)
    res = score_subject(FixtureSubject(fx), ["reference", "marlin_asym"], "cpu")
    tol = baseline["tolerance_rel"]
    calls = _calls_per_forward(fx.config)
    for r in res:
        assert r.status == "ok", r.error
        assert r.n_tokens == fx.heldout.numel() - 1
        expected = baseline["scores"][variant][r.mode]["ppl"]
        assert abs(r.ppl / expected - 1.0) <= tol, f"{r.mode}: {r.ppl} vs baseline {expected}"
        assert dict(r.report.calls) == {r.mode: calls}
    ref, marlin = res
    # Marlin's emulation computes the same weights in float64 from the pack: tiny drift only
    assert abs(marlin.ppl / ref.ppl - 1.0) < 1e-3
    assert drifts(res)["marlin_asym"][1] == pytest.approx(marlin.ppl / ref.ppl - 1.0)


# --------------------------------------------------------------------------- dispatch
def test_dispatch_counts_and_reasons():
    fx = _fixture("g128")
    cfg = fx.config
    calls, weights = _calls_per_forward(cfg), 5 * (cfg.pre + 1)
    swiglu = 2 * (cfg.pre + cfg.loops)
    sub = FixtureSubject(fx, fx.heldout[:33])                       # BT = 32
    res = {r.mode: r for r in score_subject(
        sub, ["dispatch", "dispatch_pair", "dispatch_off", "marlin_asym", "native_int4"], "cpu")}
    assert all(r.status == "ok" for r in res.values())
    on, pair, off = res["dispatch"].report, res["dispatch_pair"].report, res["dispatch_off"].report
    assert (on.packed, pair.packed, off.packed) == (weights, weights, 0)
    assert on.pack_bytes > 0 and off.pack_bytes == 0
    assert dict(on.calls) == {"marlin_asym": calls - swiglu, "native_int4": swiglu}
    assert dict(on.fallbacks) == {FUSED_REASON: swiglu}
    assert dict(pair.calls) == {"marlin_asym": calls} and pair.fallbacks == ()
    assert dict(off.calls) == {"native_int4": calls}
    assert any("dispatch disabled" in r for r, _ in off.fallbacks)
    # the pair dispatch runs exactly the forced Marlin path; dispatch off the native one
    assert res["dispatch_pair"].ppl == res["marlin_asym"].ppl
    assert res["dispatch_off"].ppl == pytest.approx(res["native_int4"].ppl, rel=1e-6)


def test_dispatch_falls_back_below_bt_16():
    fx = _fixture("row")
    calls = _calls_per_forward(fx.config)
    [r] = score_subject(FixtureSubject(fx, fx.heldout[:9]), ["dispatch_pair"], "cpu")   # BT = 8
    assert dict(r.report.calls) == {"native_int4": calls}
    [(reason, n)] = r.report.fallbacks
    assert "BT=8 < 16" in reason and n == calls


# --------------------------------------------------------------------------- malformed files
def _copy(tmp_path):
    d = tmp_path / "fx"
    shutil.copytree(FIXTURE_DIR, d)
    return d


def _rewrite(d, variant: str, mutate) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = d / f"fixture-{variant}.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    mutate(tensors)
    save_file(tensors, str(path), metadata=meta)
    j = json.loads((d / META_FILE).read_text())
    j["variants"][variant]["sha256"] = sha256_file(path)
    (d / META_FILE).write_text(json.dumps(j))


def _one_line_error(d, variant="g128", match=None) -> str:
    with pytest.raises(FixtureError) as info:
        load_fixture(variant, d)
    msg = str(info.value)
    assert "\n" not in msg
    if match:
        assert match in msg, msg
    return msg


def _set(name, value):
    return lambda t: t.__setitem__(name, value(t[name]))


@pytest.mark.parametrize("mutate, needle", [
    (_set("loop.attn_out.scale", lambda t: t.float()), "'loop.attn_out.scale' is float32"),
    (_set("embed", lambda t: t.t().contiguous()), "'embed' is float16 (256, 512)"),
    (lambda t: t.pop("final_norm"), "'final_norm' is missing"),
    (lambda t: t.__setitem__("stray", torch.zeros(2)), "unexpected tensor 'stray'"),
    (_set("pre.0.mlp_down.q4", lambda t: t.to(torch.int16)), "'pre.0.mlp_down.q4' is int16"),
    (_set("heldout_tokens", lambda t: t + 10_000), "'heldout_tokens' has ids outside"),
    (_set("loop.mlp_up.zero", lambda t: t * float("nan")), "'loop.mlp_up.zero' has non-finite"),
])
def test_malformed_tensor_is_named(tmp_path, mutate, needle):
    d = _copy(tmp_path)
    _rewrite(d, "g128", mutate)
    msg = _one_line_error(d, match=needle)
    assert "fixture-g128.safetensors" in msg


def test_truncated_or_swapped_file(tmp_path):
    d = _copy(tmp_path)
    path = d / "fixture-row.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    _one_line_error(d, "row", "fixture-row.safetensors: not a readable safetensors file")
    shutil.copy(d / "fixture-g128.safetensors", path)      # a valid file, but not this one
    _one_line_error(d, "row", "fixture-row.safetensors: sha256 does not match fixture.json")
    j = json.loads((d / META_FILE).read_text())
    j["variants"]["row"]["sha256"] = ""
    (d / META_FILE).write_text(json.dumps(j))
    _one_line_error(d, "row", "header metadata says variant 'g128'")


def test_bad_metadata(tmp_path):
    d = _copy(tmp_path)
    (d / META_FILE).write_text("{not json")
    _one_line_error(d, match="fixture.json: not valid JSON")
    j = json.loads((FIXTURE_DIR / META_FILE).read_text())
    j["config"]["d_modle"] = 256
    (d / META_FILE).write_text(json.dumps(j))
    _one_line_error(d, match="unknown config field 'd_modle'")
    with pytest.raises(FixtureError, match="unknown fixture variant 'g64'"):
        load_fixture("g64", d)
    with pytest.raises(FixtureError, match="fixture metadata not found"):
        load_fixture("g128", tmp_path / "nowhere")


def test_nibble_packing_round_trips():
    q = torch.randint(0, 16, (8, 6), dtype=torch.uint8)
    b = pack_nibbles(q)
    assert b.shape == (8, 3) and int(b[0, 0]) == int(q[0, 0]) | (int(q[0, 1]) << 4)
    assert torch.equal(unpack_nibbles(b), q)


# --------------------------------------------------------------------------- modules
def test_quant_linear_paths_agree_with_fp64():
    torch.manual_seed(0)
    w = quantize_asymmetric(torch.randn(256, 256) * 0.05, 128)
    x = torch.randn(3, 20, 256)
    bias = torch.randn(256)
    exact = (x.double().reshape(-1, 256) @ w.dequantize()).reshape(3, 20, 256) + bias.double()
    for mode in ("reference", "native_int4", "fp16_cache", "marlin_asym", "dispatch_pair"):
        lin = QuantLinear("t", w, QuantRuntime(mode, "cpu"), bias)
        y = lin(x)
        assert y.shape == (3, 20, 256) and y.dtype == torch.float32
        rel = float((y.double() - exact).abs().mean() / exact.abs().mean())
        assert rel < (1e-6 if mode == "reference" else 2e-3), (mode, rel)
    with pytest.raises(ValueError, match="input has 128 features"):
        lin(torch.randn(4, 128))


def test_runtime_rejects_unknown_and_unavailable_modes():
    with pytest.raises(ValueError, match="mode 'marlin' is not one of"):
        QuantRuntime("marlin", "cpu")
    with pytest.raises(PathUnavailable, match="tinygemm"):
        QuantRuntime("tinygemm", "cpu")


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="LoopedConfig.loops"):
        LoopedConfig(loops=0)
    with pytest.raises(ConfigError, match="n_heads"):
        LoopedConfig(d_model=256, n_heads=3)


def test_score_is_exp_of_mean_nll():
    cfg = LoopedConfig(d_model=128, ffn=256, n_heads=2, loops=2, ctx=32, vocab=64)
    torch.manual_seed(1)
    m = LoopedTransformer(cfg, FloatFactory(cfg)).eval()
    toks = torch.randint(0, 64, (20,))
    nll, n = m.nll(toks)
    assert n == 19 and m.score(toks) == pytest.approx(math.exp(nll))
    with torch.no_grad():
        logits = m(toks[None, :-1])[0]
    manual = torch.nn.functional.cross_entropy(logits, toks[1:])
    assert nll == pytest.approx(float(manual), rel=1e-5)
    with pytest.raises(ValueError, match="exceeds the model's ctx=32"):
        m(torch.zeros(1, 40, dtype=torch.long))


@pytest.mark.slow
def test_train_script_small_run(tmp_path):
    from harness.model.train import build_parser, train

    args = build_parser().parse_args([
        "--out", str(tmp_path), "--device", "cpu", "--steps", "4", "--batch", "2", "--seq", "32",
        "--train-tokens", "20000", "--eval-windows", "1", "--d-model", "128", "--ffn", "256",
        "--heads", "2", "--loops", "2", "--ctx", "64", "--log-every", "2", "--workers", "1",
        "--warmup", "1"])
    lines: list[str] = []
    meta = train(args, log=lines.append)
    assert meta["trained_on"] == "cpu" and meta["training"]["steps_done"] == 4
    assert [s for s, _ in meta["training"]["loss_curve"]] == [2, 4]
    assert any(line.startswith("step      4/4") for line in lines)
    base = json.loads((tmp_path / BASELINE_FILE).read_text())
    for v in VARIANTS:
        fx = load_fixture(v, tmp_path)
        assert fx.heldout.numel() == 65
        ref = meta["variants"][v]["reference_ppl"]
        assert base["scores"][v]["reference"]["ppl"] == pytest.approx(ref, rel=1e-5)
        assert set(base["scores"][v]) == {"reference", "native_int4", "marlin_asym", "dispatch",
                                         "dispatch_pair"}
