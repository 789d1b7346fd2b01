"""The GEMM case record: what one benchmark/validation case computes.

A case is C[M, N] = A[M, K] @ W[K, N] where W is INT4-quantized per group of
``group_size`` consecutive K rows and per output column N. ``group_size == K`` is
per-row quantization (one group; Marlin calls it per-column and wants ``-1``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

CASE_SCHEMA_VERSION = 1

#: Case kinds. ``gemm`` is one quantized linear; ``swiglu_pair`` is the two GEMMs of a
#: SwiGLU MLP (gate and up, same shape) followed by SiLU(gate) * up.
KINDS = ("gemm", "swiglu_pair")

_TAG_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True, order=True)
class GemmCase:
    """One GEMM case. Frozen; ``id`` is stable and is both the pytest id and the CSV key.

    Fields:
        M: rows of A (the batch x tokens, "BT" in the seed).
        N: output columns.
        K: reduction length.
        group_size: K rows per quantization group; ``== K`` means per-row.
        seed: seeds the case's weights (with N, K, group_size) and activations (with M, K).
        tags: free labels (layer names, matrix names, boundary names); not part of ``id``.
        kind: one of ``KINDS``.
    """

    M: int
    N: int
    K: int
    group_size: int
    seed: int = 0
    tags: tuple[str, ...] = field(default=(), compare=False)
    kind: str = "gemm"

    def __post_init__(self) -> None:
        for name in ("M", "N", "K", "group_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"GemmCase.{name} must be an int, got {value!r}")
            if value <= 0:
                raise ValueError(f"GemmCase.{name} must be positive, got {value}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"GemmCase.seed must be a non-negative int, got {self.seed!r}")
        if self.group_size > self.K:
            raise ValueError(
                f"GemmCase.group_size={self.group_size} is larger than K={self.K}"
            )
        if self.K % self.group_size != 0:
            raise ValueError(
                f"GemmCase.group_size={self.group_size} does not divide K={self.K}"
            )
        if self.kind not in KINDS:
            raise ValueError(f"GemmCase.kind={self.kind!r} is not one of {', '.join(KINDS)}")
        if not isinstance(self.tags, tuple):
            object.__setattr__(self, "tags", tuple(self.tags))
        for tag in self.tags:
            if not isinstance(tag, str) or not _TAG_RE.match(tag):
                raise ValueError(
                    f"GemmCase.tags has an invalid tag {tag!r} (letters, digits, _.- only)"
                )

    @property
    def per_row(self) -> bool:
        """True when the weight has one quantization group spanning all of K."""
        return self.group_size == self.K

    @property
    def groups(self) -> int:
        return self.K // self.group_size

    @property
    def gs_label(self) -> str:
        return "gK" if self.per_row else f"g{self.group_size}"

    @property
    def id(self) -> str:
        """Stable identifier, e.g. ``M16-N6144-K2048-g128-s0`` (``gK`` for per-row)."""
        prefix = "" if self.kind == "gemm" else f"{self.kind}-"
        return f"{prefix}M{self.M}-N{self.N}-K{self.K}-{self.gs_label}-s{self.seed}"

    @property
    def flops(self) -> int:
        """Useful floating-point operations: 2MNK per GEMM (two for a SwiGLU pair)."""
        n_gemms = 2 if self.kind == "swiglu_pair" else 1
        return 2 * self.M * self.N * self.K * n_gemms

    def with_tags(self, *tags: str) -> GemmCase:
        merged = tuple(dict.fromkeys(self.tags + tuple(tags)))
        return GemmCase(self.M, self.N, self.K, self.group_size, self.seed, merged, self.kind)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tags"] = ";".join(self.tags)
        d["id"] = self.id
        d["case_schema"] = CASE_SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict) -> GemmCase:
        tags = d.get("tags") or ()
        if isinstance(tags, str):
            tags = tuple(t for t in tags.split(";") if t)
        return cls(
            M=int(d["M"]), N=int(d["N"]), K=int(d["K"]), group_size=int(d["group_size"]),
            seed=int(d.get("seed", 0)), tags=tuple(tags), kind=str(d.get("kind", "gemm")),
        )


#: Field names a filter expression may use, with their types.
FILTER_FIELDS = {f.name: f.type for f in fields(GemmCase)} | {"groups": "int", "per_row": "bool"}
