"""``--hf-model``: a tiny randomly initialised HF causal LM written to a temp dir, scored offline.

Skips (with the reason) when ``transformers`` is not installed (``pip install transformers``;
it does not replace torch).
"""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    reason="transformers is not installed (pip install transformers) - HF path untested")

from harness.cli import main  # noqa: E402
from harness.model.hf import HfModelError, HfSubject  # noqa: E402
from harness.model.ppl import score_subject  # noqa: E402
from harness.model.quant_linear import QuantLinear, QuantRuntime  # noqa: E402

TEXT = ("the quick brown fox jumps over the lazy dog . " * 6).strip()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    d = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("text") / "sample.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def _float_ppl(model_dir, tokens, ctx) -> float:
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True).float().eval()
    total, n, i = 0.0, 0, 0
    with torch.no_grad():
        while i < tokens.numel() - 1:
            w = tokens[i: i + ctx + 1]
            logp = torch.log_softmax(m(input_ids=w[None, :-1]).logits[0].float(), -1)
            total += float(-logp.gather(1, w[1:, None]).sum())
            n += w.numel() - 1
            i += ctx
    return math.exp(total / n)


@pytest.mark.slow
def test_llama_byte_fallback_all_paths(llama_dir, text_file):
    sub = HfSubject(llama_dir, text_file, max_tokens=4096)
    assert sub.tokenizer.startswith("byte-level fallback")
    assert sub.tokens.tolist() == list(TEXT.encode())
    assert len(sub.windows()) == math.ceil((len(TEXT) - 1) / 64)       # ctx 64: several windows
    res = {r.mode: r for r in score_subject(
        sub, ["reference", "native_int4", "marlin_asym", "dispatch_pair"], "cpu")}
    for r in res.values():
        assert r.status == "ok", r.error
        assert r.n_tokens == len(TEXT) - 1
        assert r.report.weights == 14 and r.report.total_calls == 14 * len(sub.windows())
    assert len(sub.swapped) == 14 and all("lm_head" not in n for n in sub.swapped)
    ref = res["reference"].ppl
    # a random model is near uniform; INT4 moves it a little, the paths agree closely
    assert abs(ref / _float_ppl(llama_dir, sub.tokens, 64) - 1) < 0.02
    for mode in ("native_int4", "marlin_asym", "dispatch_pair"):
        assert abs(res[mode].ppl / ref - 1) < 1e-3, mode
    assert res["dispatch_pair"].report.packed == 14


def test_model_is_really_swapped(llama_dir, text_file):
    sub = HfSubject(llama_dir, text_file)
    model = sub.build(QuantRuntime("reference", "cpu"))
    kinds = {type(m).__name__ for m in model.model.layers[0].modules()}
    assert "QuantLinear" in kinds and "Linear" not in kinds
    assert isinstance(model.lm_head, torch.nn.Linear) and not isinstance(model.lm_head, QuantLinear)
    q = model.model.layers[0].mlp.down_proj
    assert (q.K, q.N, q.qweight.group_size) == (512, 256, 128)


def test_gpt2_conv1d_and_per_row(tmp_path, text_file):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=300, n_embd=192, n_layer=1, n_head=2, n_positions=128)
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path)
    sub = HfSubject(tmp_path, text_file)
    [r] = score_subject(sub, ["native_int4"], "cpu")
    assert r.status == "ok", r.error
    assert len(sub.swapped) == 4                          # c_attn, c_proj, c_fc, mlp c_proj
    model = sub.build(QuantRuntime("reference", "cpu"))
    attn = model.transformer.h[0].attn.c_attn
    assert (attn.K, attn.N, attn.qweight.group_size) == (192, 576, 192)   # K % 128 != 0: per-row


def test_own_tokenizer_is_used(llama_dir, text_file, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path / "with-tok"
    shutil.copytree(llama_dir, d)
    words = sorted(set(TEXT.split()))
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(d)
    sub = HfSubject(d, text_file)
    assert not sub.tokenizer.startswith("byte-level") and sub.tokenizer.endswith("from with-tok")
    assert sub.tokens.tolist() == [vocab[w] for w in TEXT.split()]


def test_bad_inputs_are_one_line(tmp_path, text_file, llama_dir):
    with pytest.raises(HfModelError, match="no config.json") as info:
        HfSubject(tmp_path, text_file)
    assert "\n" not in str(info.value)
    with pytest.raises(HfModelError, match="--text .*missing.txt"):
        HfSubject(llama_dir, tmp_path / "missing.txt")


def test_cli_writes_rows_and_gates(llama_dir, text_file, tmp_path):
    out, base = tmp_path / "results", tmp_path / "baselines"
    argv = ["ppl", "--cpu", "--hf-model", str(llama_dir), "--text", str(text_file), "--paths",
            "reference,native_int4", "--out", str(out), "--baselines", str(base)]  # CPU anywhere
    assert main(argv) == 3                  # no baseline yet: nothing to compare (exit 3)
    [csv_path] = list(out.glob("*/cpu/ppl-hf.csv"))
    text = csv_path.read_text()
    assert "ppl-hf-" in text and text.count("\n") == 3        # header + 2 rows
    cand = csv_path.parent / "candidate-baseline"
    (base / "cpu").mkdir(parents=True)
    for f in cand.iterdir():
        shutil.copy(f, base / "cpu" / f.name)
    assert main(argv + ["--overwrite"]) == 0                    # same numbers: the gate passes
    meta = json.loads(csv_path.with_suffix(".json").read_text())
    assert meta["matrix"] == "ppl-hf" and meta["modes"] == ["reference", "native_int4"]
