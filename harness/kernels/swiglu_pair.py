"""SwiGLU's gate/up pair as one benchmark case (case kind ``swiglu_pair``).

A pair case holds two INT4 weights of the same [K, N] (gate, up) and one activation A;
its result is ``silu(A @ W_gate) * (A @ W_up)`` ([M, N], the path's output dtype), and its
reference is the same expression in float64 on the exactly dequantized weights
(``reference_case``). Two ways to run it, the two the seed's first follow-up compares:

* ``PairPath(inner)``: any GEMM path called twice, then SiLU x mul (fp32 math, one rounding
  to the output dtype). With ``marlin_asym`` inside this is the Marlin pair dispatch
  TinyLoop does not have yet; rows keep the inner path's name (the case id says "pair").
* ``FusedNativeSwiGLU`` (path name ``native_int4_fused``): TinyLoop's ``quant_swiglu`` as
  it runs today, modelled as ONE native INT4 GEMM over [W_gate | W_up] (N doubled), then
  SiLU x mul; never Marlin-dispatched (``dispatch.FUSED_REASON``). It is what the
  dispatcher column of a pair case names.

Both answer the path contract from the path they wrap (availability, shapes, byte model,
error bound, Marlin flag, nondeterminism). The runner turns the paths it was given into
pair paths with ``paths_for_case``; neither kind is registered in ``PATHS``, so GEMM cases
never show pair rows.

Extension point: a new way to run the pair is a ``GemmPath`` with ``kinds =
("swiglu_pair",)`` whose ``prepare`` takes the (gate, up) tuple, added in ``paths_for_case``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.cases.data import QuantizedWeight

from .base import PAIR_KIND, GemmPath, Prepared
from .dispatch import FUSED_NAME, FUSED_REASON
from .reference import reference_fp64

__all__ = ["FUSED_NAME", "FUSED_REASON", "PAIR_KIND", "FusedNativeSwiGLU", "PairPath",
           "case_weights", "concat_n", "paths_for_case", "reference_case", "silu_mul"]


def concat_n(a: QuantizedWeight, b: QuantizedWeight) -> QuantizedWeight:
    """[a | b] along N (same K and group size): the fused SwiGLU's one weight."""
    if a.K != b.K or a.group_size != b.group_size:
        raise ValueError(f"concat_n: gate is K={a.K} g{a.group_size}, "
                         f"up is K={b.K} g{b.group_size}")
    return QuantizedWeight(torch.cat([a.q, b.q], 1), torch.cat([a.scale, b.scale], 1),
                           torch.cat([a.zero, b.zero], 1), a.group_size)


def silu_mul(gate: torch.Tensor, up: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out = silu(gate) * up, computed in fp32 and rounded once to ``out``'s dtype."""
    out.copy_(F.silu(gate.float()) * up.float())
    return out


def reference_case(A: torch.Tensor, weights: tuple[QuantizedWeight, ...]) -> torch.Tensor:
    """float64 reference of a case: A @ W for one weight, silu(A Wg) * (A Wu) for a pair."""
    if len(weights) == 1:
        return reference_fp64(A, weights[0])
    if len(weights) != 2:
        raise ValueError(f"reference_case: {len(weights)} weights (1 for a GEMM, 2 for a pair)")
    return F.silu(reference_fp64(A, weights[0])) * reference_fp64(A, weights[1])


def case_weights(data, device: torch.device):
    """What ``prepare`` takes for ``data``'s case: one weight, or the (gate, up) tuple."""
    if data.case.kind == PAIR_KIND:
        return tuple(w.to(device) for w in data.weights)
    return data.weight.to(device)


def _pair(weights) -> tuple[QuantizedWeight, QuantizedWeight]:
    if not (isinstance(weights, tuple) and len(weights) == 2):
        raise ValueError("a swiglu_pair path's prepare takes the (gate, up) weight tuple")
    return weights


class PairPath(GemmPath):
    """``inner`` called for gate and for up, then SiLU x mul (see the module docstring)."""

    kinds = (PAIR_KIND,)

    def __init__(self, inner: GemmPath) -> None:
        self.inner = inner
        self.name, self.role, self.nondeterminism = inner.name, inner.role, inner.nondeterminism
        self.is_marlin, self.device_types = inner.is_marlin, inner.device_types
        self.min_capability, self.weight_formula = inner.min_capability, inner.weight_formula
        self.description = f"SwiGLU pair: two {inner.name} calls, then SiLU x mul"

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self.inner.unavailable_reason(device)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return self.inner.weight_bytes(K, N, groups)

    def error_bound(self, case) -> tuple[float, str]:
        return self.inner.error_bound(case)

    def unsupported_reason(self, case) -> str | None:
        if case.kind != PAIR_KIND:
            return f"case kind {case.kind!r}: {self.name} pair runs swiglu_pair cases only"
        return self.inner.unsupported_reason(case)

    def implementation(self, device: torch.device) -> str:
        return f"2 x [{self.inner.implementation(device)}] + SiLU x mul (torch)"

    def prepare(self, weights, device: torch.device) -> Prepared:
        gate_w, up_w = _pair(weights)
        gate, up = self.inner.prepare(gate_w, device), self.inner.prepare(up_w, device)
        return Prepared(self.name, gate_w, torch.device(device),
                        {"gate": gate, "up": up, "up_weight": up_w},
                        input_dtype=gate.input_dtype, output_dtype=gate.output_dtype,
                        extra_bytes=gate.extra_bytes + up.extra_bytes + up_w.nbytes_packed(),
                        notes="; ".join(n for n in (gate.notes, up.notes) if n))

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        g, u = torch.empty_like(out), torch.empty_like(out)
        self.inner.run(prepared.state["gate"], A, g)
        self.inner.run(prepared.state["up"], A, u)
        return silu_mul(g, u, out)


class FusedNativeSwiGLU(GemmPath):
    """TinyLoop's fused ``quant_swiglu``: one native INT4 GEMM over [gate | up], SiLU x mul."""

    name = FUSED_NAME
    kinds = (PAIR_KIND,)

    def __init__(self, native: GemmPath) -> None:
        self.native, self.role, self.nondeterminism = native, native.role, native.nondeterminism
        self.device_types, self.min_capability = native.device_types, native.min_capability
        self.weight_formula = native.weight_formula
        self.description = ("quant_swiglu modelled: one native_int4 GEMM over [W_gate | W_up], "
                            "SiLU x mul")

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self.native.unavailable_reason(device)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return self.native.weight_bytes(K, N, groups)    # [gate | up] is two [K, N] weights

    def error_bound(self, case) -> tuple[float, str]:
        return self.native.error_bound(case)

    def unsupported_reason(self, case) -> str | None:
        if case.kind != PAIR_KIND:
            return f"case kind {case.kind!r}: {FUSED_NAME} runs swiglu_pair cases only"
        return None

    def implementation(self, device: torch.device) -> str:
        return f"[{self.native.implementation(device)}] over N x 2 + SiLU x mul (torch)"

    def prepare(self, weights, device: torch.device) -> Prepared:
        gate_w, up_w = _pair(weights)
        fused = self.native.prepare(concat_n(gate_w, up_w), device)
        return Prepared(FUSED_NAME, gate_w, torch.device(device),
                        {"fused": fused, "up_weight": up_w},
                        input_dtype=fused.input_dtype, output_dtype=fused.output_dtype,
                        extra_bytes=fused.extra_bytes, notes=fused.notes)

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        N = out.shape[1]
        both = torch.empty(out.shape[0], 2 * N, dtype=out.dtype, device=out.device)
        self.native.run(prepared.state["fused"], A, both)
        return silu_mul(both[:, :N], both[:, N:], out)


def paths_for_case(case, paths: list[GemmPath]) -> list[GemmPath]:
    """The paths to run on ``case``: ``paths`` for a GEMM; for a pair, each one as a
    ``PairPath`` plus ``FusedNativeSwiGLU`` right after ``native_int4`` when it is listed."""
    if case.kind != PAIR_KIND:
        return paths
    out: list[GemmPath] = []
    for p in paths:
        out.append(PairPath(p))
        if p.name == "native_int4":
            out.append(FusedNativeSwiGLU(p))
    return out
