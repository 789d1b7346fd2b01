"""The perplexity fixture on disk: one JSON of metadata plus one safetensors file per variant.

``fixtures/fixture.json`` holds the model config, how it was trained (loss curve, device,
steps), its float and reference perplexities, the uniform perplexity (= vocab size) and,
per variant, the file name and its sha256. Each ``fixture-<variant>.safetensors`` is
self-contained:

==============================  =========  ========================================
tensor                          dtype      shape
==============================  =========  ========================================
embed                           float16    [vocab, d_model]
head                            float16    [d_model, vocab]  (never quantized)
final_norm                      float16    [d_model]
<block>.attn_norm, .mlp_norm    float16    [d_model]
<block>.<proj>.q4               uint8      [K, N // 2]  two codes a byte: column 2j in
                                                        the low nibble, 2j + 1 in the high
<block>.<proj>.scale, .zero     float16    [K // group_size, N]
heldout_tokens                  int32      [L]  the scored held-out sequence
==============================  =========  ========================================

``<block>`` is ``pre.0 .. pre.{pre-1}`` and ``loop``; ``<proj>`` is one of
``transformer.LINEAR_NAMES``; group_size is 128 (variant ``g128``) or K (``row``).
Loading checks every name, dtype and shape (and the sha256 recorded in the JSON) and
raises ``FixtureError`` with one line naming the file and the tensor.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from harness.cases.data import QuantizedWeight

from .quant_linear import QuantFactory
from .transformer import LINEAR_NAMES, LoopedConfig, LoopedTransformer

FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures"
META_FILE = "fixture.json"
FORMAT = "harness-looped-int4"
FORMAT_VERSION = 1
#: variant name -> group size (None: per-row, group_size == K).
VARIANTS: dict[str, int | None] = {"g128": 128, "row": None}


class FixtureError(ValueError):
    """A missing or malformed fixture file; the message names the file and the tensor."""


@dataclass(frozen=True, eq=False)
class Fixture:
    """One loaded variant: config, quantized projections, float tensors, held-out tokens."""

    variant: str
    config: LoopedConfig
    weights: dict[str, QuantizedWeight]   # "pre.0.attn_qkv" -> weight (K x N)
    floats: dict[str, torch.Tensor]       # embed, head, norms (float16)
    heldout: torch.Tensor                 # int64 [L]
    meta: dict                            # the fixture JSON
    path: Path

    @property
    def case_id(self) -> str:
        return f"ppl-fixture-{self.variant}"

    @property
    def trained_on(self) -> str:
        return str(self.meta.get("trained_on", "unknown"))

    def model(self, runtime) -> LoopedTransformer:
        """The quantized looped model whose projections run through ``runtime`` (a QuantRuntime)."""
        m = LoopedTransformer(self.config, QuantFactory(self.weights, runtime))
        with torch.no_grad():
            m.embed.weight.copy_(self.floats["embed"].float())
            m.head.copy_(self.floats["head"].float())
            m.final_norm.weight.copy_(self.floats["final_norm"].float())
            for name, block in m.blocks():
                block.attn_norm.weight.copy_(self.floats[f"{name}.attn_norm"].float())
                block.mlp_norm.weight.copy_(self.floats[f"{name}.mlp_norm"].float())
        m = m.to(runtime.device).eval()
        for _, block in m.blocks():
            runtime.prepare_swiglu(block.mlp_gate, block.mlp_up)
        return m


def group_size_for(variant: str, K: int) -> int:
    if variant not in VARIANTS:
        raise FixtureError(f"unknown fixture variant {variant!r}; valid: {', '.join(VARIANTS)}")
    gs = VARIANTS[variant]
    return K if gs is None else gs


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """uint8 codes [K, N] (0..15, N even) -> [K, N // 2], column 2j low, 2j + 1 high."""
    if q.dtype != torch.uint8 or q.dim() != 2 or q.shape[1] % 2:
        raise ValueError(f"codes must be uint8 [K, N] with N even, got {q.dtype} {tuple(q.shape)}")
    return q[:, 0::2] | (q[:, 1::2] << 4)


def unpack_nibbles(b: torch.Tensor) -> torch.Tensor:
    out = torch.empty(b.shape[0], 2 * b.shape[1], dtype=torch.uint8)
    out[:, 0::2] = b & 15
    out[:, 1::2] = b >> 4
    return out


def expected_tensors(cfg: LoopedConfig, variant: str) -> dict[str, tuple[torch.dtype, tuple]]:
    """Every tensor a variant file must hold: name -> (dtype, shape), except heldout length."""
    d, V = cfg.d_model, cfg.vocab
    exp: dict[str, tuple[torch.dtype, tuple]] = {
        "embed": (torch.float16, (V, d)), "head": (torch.float16, (d, V)),
        "final_norm": (torch.float16, (d,)),
    }
    for block in cfg.block_names():
        exp[f"{block}.attn_norm"] = (torch.float16, (d,))
        exp[f"{block}.mlp_norm"] = (torch.float16, (d,))
        for proj in LINEAR_NAMES:
            K, N = cfg.linear_shape(proj)
            gs = group_size_for(variant, K)
            if K % gs or N % 2:
                raise FixtureError(
                    f"variant {variant}: {block}.{proj} K={K} N={N} does not fit group {gs}")
            exp[f"{block}.{proj}.q4"] = (torch.uint8, (K, N // 2))
            exp[f"{block}.{proj}.scale"] = (torch.float16, (K // gs, N))
            exp[f"{block}.{proj}.zero"] = (torch.float16, (K // gs, N))
    return exp


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_variant(path: Path, variant: str, cfg: LoopedConfig, floats: dict[str, torch.Tensor],
                  weights: dict[str, QuantizedWeight], heldout: torch.Tensor) -> str:
    """Write one variant file; returns its sha256. Inverse of ``load_fixture``."""
    tensors = {k: v.detach().to(torch.float16).cpu().contiguous() for k, v in floats.items()}
    for name, w in weights.items():
        tensors[f"{name}.q4"] = pack_nibbles(w.q.cpu()).contiguous()
        tensors[f"{name}.scale"] = w.scale.cpu().contiguous()
        tensors[f"{name}.zero"] = w.zero.cpu().contiguous()
    tensors["heldout_tokens"] = heldout.to(torch.int32).cpu().contiguous()
    exp = expected_tensors(cfg, variant)
    missing = sorted(set(exp) - set(tensors))
    if missing:
        raise FixtureError(f"{path.name}: refusing to write, tensor {missing[0]!r} is missing")
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "variant": variant,
            "config": json.dumps(cfg.to_dict(), sort_keys=True)}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=meta)
    return sha256_file(path)


def load_meta(directory: Path | str | None = None) -> dict:
    """The fixture JSON (checked for format and config)."""
    directory = Path(directory) if directory is not None else FIXTURE_DIR
    path = directory / META_FILE
    if not path.is_file():
        raise FixtureError(f"{path}: fixture metadata not found "
                           "(train one: python -m harness.model.train)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FixtureError(f"{path.name}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise FixtureError(f"{path.name}: field 'format' must be {FORMAT!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise FixtureError(f"{path.name}: field 'format_version' must be {FORMAT_VERSION}")
    if not isinstance(meta.get("config"), dict):
        raise FixtureError(f"{path.name}: field 'config' is missing or not an object")
    if not isinstance(meta.get("variants"), dict):
        raise FixtureError(f"{path.name}: field 'variants' is missing or not an object")
    try:
        LoopedConfig.from_dict(meta["config"], source=f"{path.name}: config")
    except (TypeError, ValueError) as exc:
        raise FixtureError(f"{path.name}: {exc}") from None
    return meta


def _read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    if not path.is_file():
        raise FixtureError(f"{path.name}: fixture file not found in {path.parent}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # safetensors raises its own error types for a bad header
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FixtureError(f"{path.name}: not a readable safetensors file ({detail})") from None
    return tensors, meta


def load_fixture(variant: str = "g128", directory: Path | str | None = None,
                 check_sha: bool = True) -> Fixture:
    """Load and validate one variant ("g128" or "row") from ``directory`` (default: fixtures/)."""
    directory = Path(directory) if directory is not None else FIXTURE_DIR
    if variant not in VARIANTS:
        raise FixtureError(f"unknown fixture variant {variant!r}; valid: {', '.join(VARIANTS)}")
    meta = load_meta(directory)
    cfg = LoopedConfig.from_dict(meta["config"])
    entry = meta["variants"].get(variant)
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise FixtureError(f"{META_FILE}: variants.{variant}.file is missing")
    path = directory / Path(entry["file"]).name
    tensors, file_meta = _read_safetensors(path)
    if check_sha and entry.get("sha256") and sha256_file(path) != entry["sha256"]:
        raise FixtureError(f"{path.name}: sha256 does not match {META_FILE} (mixed fixture files?)")
    if file_meta.get("variant") != variant or file_meta.get("format") != FORMAT:
        raise FixtureError(f"{path.name}: header metadata says "
                           f"variant {file_meta.get('variant')!r}, "
                           f"format {file_meta.get('format')!r}; expected {variant!r}, {FORMAT!r}")
    exp = expected_tensors(cfg, variant)
    exp_all = set(exp) | {"heldout_tokens"}
    for name in sorted(exp_all - set(tensors)):
        raise FixtureError(f"{path.name}: tensor {name!r} is missing")
    for name in sorted(set(tensors) - exp_all):
        raise FixtureError(f"{path.name}: unexpected tensor {name!r}")
    for name, (dtype, shape) in exp.items():
        t = tensors[name]
        if t.dtype != dtype or tuple(t.shape) != shape:
            raise FixtureError(f"{path.name}: tensor {name!r} is "
                               f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}, "
                               f"expected {str(dtype).removeprefix('torch.')} {shape}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise FixtureError(f"{path.name}: tensor {name!r} has non-finite values")
    held = tensors["heldout_tokens"]
    if held.dtype != torch.int32 or held.dim() != 1 or held.numel() < 2:
        raise FixtureError(f"{path.name}: tensor 'heldout_tokens' must be int32 [L >= 2], "
                           f"got {held.dtype} {tuple(held.shape)}")
    if int(held.min()) < 0 or int(held.max()) >= cfg.vocab:
        raise FixtureError(
            f"{path.name}: tensor 'heldout_tokens' has ids outside 0..{cfg.vocab - 1}")
    weights = {}
    for block in cfg.block_names():
        for proj in LINEAR_NAMES:
            name = f"{block}.{proj}"
            K, _ = cfg.linear_shape(proj)
            scale = tensors[f"{name}.scale"]
            if bool((scale < 0).any()):
                raise FixtureError(f"{path.name}: tensor '{name}.scale' has negative values")
            weights[name] = QuantizedWeight(unpack_nibbles(tensors[f"{name}.q4"]), scale,
                                            tensors[f"{name}.zero"], group_size_for(variant, K))
    floats = {k: v for k, v in tensors.items()
              if k in exp and not k.endswith((".q4", ".scale", ".zero"))}
    return Fixture(variant, cfg, weights, floats, held.long(), meta, path)

