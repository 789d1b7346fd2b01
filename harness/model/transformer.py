"""A TinyLoop-style looped transformer: ``pre`` blocks, then one shared block run ``loops`` times.

    tokens -> embed -> pre blocks -> (shared block) x loops -> RMSNorm -> head -> logits

Each block is pre-norm: ``x += attn_out(attention(attn_qkv(rms(x))))`` then
``x += mlp_down(silu(mlp_gate(rms(x))) * mlp_up(rms(x)))``. Attention is causal, multi-head,
with rotary position embeddings. The five projections are the model's GEMMs; they are
built by a ``LinearFactory`` so the same module tree serves for training (float
weights) and for scoring (``QuantLinear`` modules that run an INT4 path). The vocab head
is a plain fp16 weight computed in fp32, never quantized (TinyLoop does not pack it).

Weights are stored as W[K, N] (in x out) and applied as ``x @ W``, the harness's GEMM
convention. Everything outside the projections (norms, RoPE, softmax, residual stream,
head, log-softmax) runs in fp32 (bf16 autocast when training), so in a quantized model
the only differences between paths come from the projections.

Extension point: ``LinearFactory`` (``linear(name, K, N)`` and ``swiglu(gate, up, x)``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

#: The five projections of a block, in execution order, with (K, N) as functions of the config.
LINEAR_NAMES = ("attn_qkv", "attn_out", "mlp_gate", "mlp_up", "mlp_down")


class ConfigError(ValueError):
    """A model config field is invalid (the message names it)."""


@dataclass(frozen=True)
class LoopedConfig:
    """Shape of a looped transformer. ``d_model`` and ``ffn`` should be multiples of 256
    for Marlin (every projection then has K % 128 == 0 and N % 256 == 0)."""

    vocab: int = 512
    d_model: int = 256
    n_heads: int = 4
    ffn: int = 1024
    pre: int = 1
    loops: int = 4
    ctx: int = 1024
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "n_heads", "ffn", "loops", "ctx"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"LoopedConfig.{name} must be a positive int, got {v!r}")
        if isinstance(self.pre, bool) or not isinstance(self.pre, int) or self.pre < 0:
            raise ConfigError(f"LoopedConfig.pre must be a non-negative int, got {self.pre!r}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ConfigError(
                f"LoopedConfig.d_model={self.d_model} must split into n_heads={self.n_heads} "
                "heads of even size"
            )
        for name in ("norm_eps", "rope_theta"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"LoopedConfig.{name} must be a positive number, got {v!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def block_names(self) -> list[str]:
        """Unique blocks: ``pre.0 .. pre.{pre-1}`` then ``loop`` (the shared one)."""
        return [f"pre.{i}" for i in range(self.pre)] + ["loop"]

    def linear_shape(self, name: str) -> tuple[int, int]:
        """(K, N) of a projection."""
        d, f = self.d_model, self.ffn
        shapes = {"attn_qkv": (d, 3 * d), "attn_out": (d, d), "mlp_gate": (d, f),
                  "mlp_up": (d, f), "mlp_down": (f, d)}
        if name not in shapes:
            raise ConfigError(f"unknown projection {name!r}; valid: {', '.join(LINEAR_NAMES)}")
        return shapes[name]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> LoopedConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown config field {unknown[0]!r}")
        return cls(**d)


class LinearFactory(Protocol):
    """Builds the projections and runs SwiGLU's gate/up pair (extension point)."""

    def linear(self, name: str, K: int, N: int) -> nn.Module:
        """A module mapping [..., K] -> [..., N] (fp32 in and out), e.g. ``pre.0.mlp_up``."""

    def swiglu(self, gate: nn.Module, up: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """silu(gate(x)) * up(x), however the backend chooses to run the pair."""


class FloatLinear(nn.Module):
    """A trainable projection, W[K, N] fp32, ``x @ W``."""

    def __init__(self, K: int, N: int, std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(K, N) * std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class FloatFactory:
    """Float projections for training; init std 0.02, output projections scaled down."""

    def __init__(self, cfg: LoopedConfig) -> None:
        self.residual_std = 0.02 / math.sqrt(2 * (cfg.pre + cfg.loops))

    def linear(self, name: str, K: int, N: int) -> nn.Module:
        out_proj = name.endswith(("attn_out", "mlp_down"))
        return FloatLinear(K, N, self.residual_std if out_proj else 0.02)

    def swiglu(self, gate: nn.Module, up: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return F.silu(gate(x)) * up(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_tables(T: int, head_dim: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, head_dim // 2] in fp32."""
    even = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32)
    inv = 1.0 / theta ** (even / head_dim)
    ang = torch.arange(T, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    """One pre-norm transformer block with fused QKV and a SwiGLU MLP."""

    def __init__(self, cfg: LoopedConfig, prefix: str, factory: LinearFactory) -> None:
        super().__init__()
        self.cfg, self.factory, self.prefix = cfg, factory, prefix
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        for name in LINEAR_NAMES:
            K, N = cfg.linear_shape(name)
            setattr(self, name, factory.linear(f"{prefix}.{name}", K, N))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        H, hd = self.cfg.n_heads, self.cfg.head_dim
        qkv = self.attn_qkv(self.attn_norm(x)).view(B, T, 3, H, hd)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))   # [B, H, T, hd]
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(att.transpose(1, 2).reshape(B, T, D))
        h = self.mlp_norm(x)
        return x + self.mlp_down(self.factory.swiglu(self.mlp_gate, self.mlp_up, h))


class LoopedTransformer(nn.Module):
    """The looped model. ``forward(tokens[B, T]) -> logits[B, T, vocab]`` (fp32)."""

    def __init__(self, cfg: LoopedConfig, factory: LinearFactory) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pre = nn.ModuleList(Block(cfg, f"pre.{i}", factory) for i in range(cfg.pre))
        self.loop = Block(cfg, "loop", factory)
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.head = nn.Parameter(torch.randn(cfg.d_model, cfg.vocab) * 0.02)

    def blocks(self) -> list[tuple[str, Block]]:
        """Unique blocks by name (``pre.i`` and ``loop``)."""
        return [(f"pre.{i}", b) for i, b in enumerate(self.pre)] + [("loop", self.loop)]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, T], got shape {tuple(tokens.shape)}")
        T = tokens.shape[1]
        if T > self.cfg.ctx:
            raise ValueError(f"tokens: sequence length {T} exceeds the model's ctx={self.cfg.ctx}")
        cos, sin = rope_tables(T, self.cfg.head_dim, self.cfg.rope_theta, tokens.device)
        x = self.embed(tokens).float()
        for block in self.pre:
            x = block(x, cos, sin)
        for _ in range(self.cfg.loops):
            x = self.loop(x, cos, sin)
        x = self.final_norm(x)
        return x.float() @ self.head.float()

    @torch.no_grad()
    def nll(self, tokens: torch.Tensor) -> tuple[float, int]:
        """Teacher-forced mean NLL (nats) of tokens[1:] given tokens[:-1], and the count."""
        tokens = torch.as_tensor(tokens).reshape(-1).long()
        if tokens.numel() < 2:
            raise ValueError("tokens: need at least 2 tokens to score")
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.vocab:
            raise ValueError(f"tokens: ids must lie in 0..{self.cfg.vocab - 1}")
        device = self.head.device
        inp, tgt = tokens[:-1].to(device)[None], tokens[1:].to(device)
        logp = torch.log_softmax(self(inp)[0].float(), dim=-1)
        nll = -logp.gather(1, tgt[:, None]).double().mean()
        return float(nll), int(tgt.numel())

    def score(self, tokens: torch.Tensor) -> float:
        """Perplexity exp(mean NLL) of tokens[1:], teacher-forced (the seed's Model.score())."""
        return math.exp(self.nll(tokens)[0])
