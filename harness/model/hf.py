"""``harness ppl --hf-model DIR --text FILE``: a local Hugging Face causal LM through the
INT4 paths.

Offline only: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are set before
``transformers`` is imported and every load passes ``local_files_only=True``; nothing is
downloaded. For each mode a fresh copy is loaded from ``DIR`` in fp32, every ``nn.Linear``
(and GPT-2's ``Conv1D``) except the output embedding (``lm_head``) is quantized with the
project's asymmetric min-max converter (group 128 where K % 128 == 0, else per-row) and
replaced by a ``QuantLinear`` running that mode. The text is tokenized with the model's
own tokenizer when ``DIR`` has one, else byte-level (token id = UTF-8 byte, needs a
vocabulary of at least 256; the result says which). Sequences longer than the model's
context are scored as consecutive windows (teacher-forced, mean NLL over every target).

Note: Hugging Face MLPs call gate and up as two separate projections, so every mode runs
them as two quant_gemm calls (there is no fused SwiGLU to model here).

``transformers`` is an optional dependency (``pip install transformers``; it does not
replace torch). Without it ``HfSubject`` raises ``HfModelError`` saying so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from torch import nn

from harness.cases.data import quantize_asymmetric

from .quant_linear import FLOAT, QuantLinear, QuantRuntime

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                   "spiece.model")


class HfModelError(ValueError):
    """A bad --hf-model directory or --text file, or transformers missing (one line)."""


def _transformers():
    """The ``transformers`` module (offline, with ``pytorch_utils`` loaded), imported on
    first use; ``HfModelError`` saying how to install it when it is missing."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers.pytorch_utils  # optional: transformers (only --hf-model needs it)
    except ImportError as exc:
        raise HfModelError(
            f"transformers is not installed ({exc}); pip install transformers") from None
    return transformers


def transformers_unavailable_reason() -> str | None:
    """None when ``transformers`` imports; otherwise why not."""
    try:
        _transformers()
    except HfModelError as exc:
        return str(exc)
    return None


def _weight_of(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(W[K, N], bias) of a projection module, or None if it is not one."""
    if isinstance(module, nn.Linear):
        return module.weight.detach().float().t().contiguous(), module.bias
    try:
        Conv1D = _transformers().pytorch_utils.Conv1D
    except HfModelError:
        return None
    if isinstance(module, Conv1D):  # GPT-2: weight is already [in, out]
        return module.weight.detach().float().contiguous(), module.bias
    return None


def quantize_linears(model: nn.Module, runtime: QuantRuntime, group_size: int = 128) -> list[str]:
    """Replace every projection except the output embedding by a ``QuantLinear``; their names."""
    skip = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    swapped = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if child is skip:
                continue
            found = _weight_of(child)
            if found is None:
                continue
            W, bias = found
            K = W.shape[0]
            gs = group_size if group_size and K % group_size == 0 else K   # 0: per-row
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            setattr(parent, child_name,
                    QuantLinear(name, quantize_asymmetric(W, gs), runtime, bias))
            swapped.append(name)
    if not swapped:
        raise HfModelError("the model has no nn.Linear / Conv1D projection to quantize")
    return swapped


def _context_length(config) -> int:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(config, attr, None)
        if isinstance(v, int) and v > 1:
            return v
    return 1024


def tokenize(model_dir: Path, text: str, vocab_size: int) -> tuple[torch.Tensor, str]:
    """Token ids of ``text`` and a description of the tokenizer used."""
    if any((model_dir / f).is_file() for f in TOKENIZER_FILES):
        try:
            tok = _transformers().AutoTokenizer.from_pretrained(str(model_dir),
                                                                local_files_only=True)
        except (OSError, ValueError) as exc:
            raise HfModelError(f"{model_dir}: tokenizer files present but not loadable "
                               f"({' '.join(str(exc).split())[:200]})") from None
        ids = tok(text)["input_ids"]
        desc = f"{type(tok).__name__} from {model_dir.name}"
    else:
        if vocab_size < 256:
            raise HfModelError(f"{model_dir}: no tokenizer, and the vocabulary ({vocab_size}) "
                               "is too small for the byte-level fallback (needs >= 256)")
        ids = list(text.encode("utf-8"))
        desc = f"byte-level fallback (no tokenizer in {model_dir.name}): token id = UTF-8 byte"
    t = torch.tensor(ids, dtype=torch.long)
    if t.numel() and int(t.max()) >= vocab_size:
        raise HfModelError(
            f"tokenizer produced id {int(t.max())} >= the model's vocab_size {vocab_size}")
    return t, desc


class HfSubject:
    """A local HF causal LM and a text file, scored like the fixture (see ``ppl.score_subject``)."""

    def __init__(self, model_dir: str | Path, text_file: str | Path, max_tokens: int = 1025,
                 group_size: int = 128) -> None:
        reason = transformers_unavailable_reason()
        if reason:
            raise HfModelError(f"--hf-model needs transformers: {reason}")
        self.dir = Path(model_dir)
        if not (self.dir / "config.json").is_file():
            raise HfModelError(
                f"--hf-model {self.dir}: not a local model directory (no config.json)")
        path = Path(text_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise HfModelError(f"--text {path}: cannot read it as UTF-8 ({exc})") from None
        if max_tokens < 2:
            raise HfModelError(f"--max-tokens must be >= 2, got {max_tokens}")
        try:
            self.config = _transformers().AutoConfig.from_pretrained(str(self.dir),
                                                                     local_files_only=True)
        except (OSError, ValueError) as exc:
            why = " ".join(str(exc).split())[:200]
            raise HfModelError(f"--hf-model {self.dir}: config not loadable ({why})") from None
        vocab = int(getattr(self.config, "vocab_size", 0) or 0)
        tokens, self.tokenizer = tokenize(self.dir, text, vocab)
        self.tokens = tokens[:max_tokens]
        if self.tokens.numel() < 2:
            raise HfModelError(f"--text {path}: fewer than 2 tokens to score")
        self.ctx = _context_length(self.config)
        self.group_size = group_size
        self.swapped: list[str] = []
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.dir.resolve().name).strip("-") or "model"
        self.case_id = f"ppl-hf-{slug}"
        hidden = int(getattr(self.config, "hidden_size", 0)
                     or getattr(self.config, "n_embd", 0) or 0)
        self.shape = dict(M=self.tokens.numel() - 1, N=vocab, K=hidden, group_size=group_size,
                          seed=0)
        self.tags = f"hf;{slug}"

    def load(self) -> nn.Module:
        """A fresh fp32 copy of the model from disk (offline)."""
        transformers = _transformers()
        transformers.utils.logging.disable_progress_bar()
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(str(self.dir),
                                                                      local_files_only=True)
        except (OSError, ValueError) as exc:
            why = " ".join(str(exc).split())[:200]
            raise HfModelError(f"--hf-model {self.dir}: not loadable ({why})") from None
        return model.float().eval()

    def build(self, runtime: QuantRuntime) -> nn.Module:
        model = self.load()
        if runtime.mode != FLOAT:      # float: the model as loaded, nothing quantized
            self.swapped = quantize_linears(model, runtime, self.group_size)
        return model.to(runtime.device)

    def windows(self) -> list[torch.Tensor]:
        """Consecutive windows of at most ctx + 1 tokens, each sharing its first token with the
        previous window's last (every token after the first is a target exactly once)."""
        out, i, n = [], 0, self.tokens.numel()
        while i < n - 1:
            out.append(self.tokens[i: i + self.ctx + 1])
            i += self.ctx
        return out

    @torch.no_grad()
    def nll(self, model: nn.Module) -> tuple[float, int]:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for w in self.windows():
            w = w.to(device)
            logits = model(input_ids=w[None, :-1]).logits[0].float()
            logp = torch.log_softmax(logits, dim=-1)
            total += float(-logp.gather(1, w[1:, None]).double().sum())
            count += w.numel() - 1
        return total / count, count

    def forward(self, model: nn.Module):
        device = next(model.parameters()).device
        inp = self.windows()[0][:-1].to(device)[None]

        def step():
            with torch.no_grad():
                return model(input_ids=inp)

        return step
