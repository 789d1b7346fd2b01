"""INT4 projections for the model: ``QuantLinear`` modules and the ``QuantRuntime`` that runs them.

A ``QuantRuntime`` fixes how every GEMM of one model instance runs (its *mode*):

* ``reference``: fp32 activations times the exactly dequantized weight in fp32;
* a path name (``native_int4``, ``fp16_cache``, ``marlin_asym``, ``tinygemm``, ...): that
  path forced for every projection (``prepare`` at load, ``run`` per call; a kernel
  status or an unsupported weight is an error, never a silent fallback);
* ``dispatch`` / ``dispatch_off``: TinyLoop's ``quant_gemm`` as modelled by
  ``harness.kernels.quant_gemm.QuantGemm`` with Marlin dispatch on / off (the seed's A/B).
  The MLP's gate and up run as TinyLoop runs ``quant_swiglu`` today: one native INT4
  GEMM over the concatenated [gate | up] weight, then SiLU * mul (**fused native,
  modelled**: the real kernel is fused; the harness models it with one native call), never
  Marlin, each recorded with that reason;
* ``dispatch_pair``: the seed's first follow-up, a **Marlin pair dispatch**: gate and up are
  two ``quant_gemm`` calls (Marlin + correction when the preconditions hold), then SiLU * mul.

On a CPU, ``dispatch*`` modes model an SM 8.9 GPU (``capability``) with Marlin emulated by
the ``marlin_asym`` path's CPU emulation and its status predicted by
``dispatch.expected_marlin_rc``; ``implementation()`` says so.

Every call is recorded (projection, path, fallback reason); ``report()`` summarises them with
the number of weights packed for Marlin and the load-time memory the paths hold.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.cases.data import QuantizedWeight
from harness.kernels import dispatch as dsp
from harness.kernels.base import KernelReturnCode, Prepared, UnsupportedCase
from harness.kernels.marlin.asym import marlin_mm_asymmetric
from harness.kernels.marlin.pack import MarlinPackError
from harness.kernels.quant_gemm import QuantGemm
from harness.kernels.registry_load import load_all
from harness.kernels.swiglu_pair import FUSED_REASON, concat_n

DISPATCH_MODES = ("dispatch", "dispatch_off", "dispatch_pair")
REFERENCE = "reference"
#: The subject's own float weights, nothing quantized (a real model's dequantized GGUF, a
#: local HF model as loaded); a subject without float weights says it is unavailable.
FLOAT = "float"
CPU_MODEL_CAPABILITY = (8, 9)


class PathUnavailable(RuntimeError):
    """The mode's path cannot run here or cannot take one of the model's weights (one line)."""


def known_modes() -> list[str]:
    """Every mode a runtime accepts: float, reference, the registered paths, the dispatch
    modes."""
    return [FLOAT, REFERENCE, *load_all().names(), *DISPATCH_MODES]


@dataclass(frozen=True)
class CallRecord:
    linear: str
    path: str
    reason: str = ""


@dataclass(frozen=True)
class DispatchReport:
    """What one model instance did: packing, memory, and the calls since the last reset."""

    mode: str
    implementation: str
    weights: int                                  # quantized projections (unique weights)
    packed: int                                   # of those, packed for Marlin at load
    calls: tuple[tuple[str, int], ...]            # path -> GEMM calls
    fallbacks: tuple[tuple[str, int], ...]        # reason -> calls that did not take Marlin
    extra_bytes: int                              # memory held by the prepared paths
    pack_bytes: int                               # of which the Marlin pack + workspace
    prepare_seconds: float
    pack_errors: tuple[str, ...] = ()             # "name: why" for weights the packer refused

    @property
    def total_calls(self) -> int:
        return sum(n for _, n in self.calls)

    def calls_text(self) -> str:
        """``marlin_asym:20;native_int4:5`` (the ResultRow ``dispatch_path`` column)."""
        return ";".join(f"{p}:{n}" for p, n in self.calls)

    def fallbacks_text(self) -> str:
        return "; ".join(f"{r} (x{n})" for r, n in self.fallbacks)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "implementation": self.implementation, "weights": self.weights,
                "packed": self.packed, "calls": dict(self.calls), "fallbacks": dict(self.fallbacks),
                "extra_bytes": self.extra_bytes, "pack_bytes": self.pack_bytes,
                "prepare_seconds": round(self.prepare_seconds, 4),
                "pack_errors": list(self.pack_errors)}


class QuantLinear(nn.Module):
    """y = x @ dequant(W) (+ bias) with W an INT4 ``QuantizedWeight`` [K, N], via ``runtime``."""

    def __init__(self, name: str, weight: QuantizedWeight, runtime: QuantRuntime,
                 bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.name, self.qweight, self.runtime = name, weight, runtime
        self.K, self.N = weight.K, weight.N
        if bias is not None and tuple(bias.shape) != (self.N,):
            raise ValueError(f"{name}: bias must have shape ({self.N},), got {tuple(bias.shape)}")
        self.register_buffer(
            "bias", None if bias is None else bias.detach().float().to(runtime.device))
        self.state: dict = {}
        runtime.prepare(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.K:
            raise ValueError(
                f"{self.name}: input has {x.shape[-1]} features, the weight has K={self.K}")
        y = self.runtime.gemm(self, x.reshape(-1, self.K)).reshape(*x.shape[:-1], self.N)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"{self.name}: K={self.K}, N={self.N}, group_size={self.qweight.group_size}, "
                f"mode={self.runtime.mode}")


class QuantRuntime:
    """Runs every ``QuantLinear`` of a model in one ``mode`` on one ``device``.

    ``capability`` overrides the GPU the dispatcher sees (default: the device's, or SM 8.9
    emulated on a CPU); ``allow_sm90`` is the dispatcher's Hopper opt-in (None: from
    ``$HARNESS_MARLIN_SM90``).
    """

    def __init__(self, mode: str, device: torch.device | str = "cpu", *,
                 capability: tuple[int, int] | None = None, allow_sm90: bool | None = None) -> None:
        self.registry = load_all()
        if mode not in known_modes():
            raise ValueError(f"mode {mode!r} is not one of {', '.join(known_modes())}")
        self.mode, self.device = mode, torch.device(device)
        self.records: list[CallRecord] = []
        self.linears: list[QuantLinear] = []
        self.prepare_seconds = 0.0
        self.path = None
        if mode in self.registry.names():
            self.path = self.registry.get(mode)
            reason = self.path.unavailable_reason(self.device)
            if reason:
                raise PathUnavailable(f"{mode}: {reason}")
        self.dispatch = mode in DISPATCH_MODES
        self.fused_swiglu = mode in ("dispatch", "dispatch_off")
        if self.dispatch:
            self.native = self.registry.get(dsp.PATH_NATIVE)
            self.marlin = self.registry.get(dsp.PATH_MARLIN)
            emulated = self.device.type != "cuda"
            self.capability = capability or (CPU_MODEL_CAPABILITY if emulated else None)
            self.settings = dsp.DispatchSettings(marlin_enabled=mode != "dispatch_off",
                                                 allow_sm90=allow_sm90)
            self.marlin_reason = self.marlin.unavailable_reason(self.device)
            native_reason = self.native.unavailable_reason(self.device)
            if native_reason:
                raise PathUnavailable(f"{mode}: the dispatcher's fallback native_int4 is "
                                      f"unavailable: {native_reason}")

    # ------------------------------------------------------------------ load time
    def prepare(self, lin: QuantLinear) -> None:
        """Load-time work for one projection (called by ``QuantLinear.__init__``)."""
        t0 = time.perf_counter()
        try:
            if self.mode == REFERENCE:
                W = lin.qweight.dequantize(torch.float64).to(torch.float32)
                lin.state["W"] = W.to(self.device)
            elif self.path is not None:
                why = self.path.unsupported_weight_reason(lin.qweight)
                if why:
                    raise UnsupportedCase(f"{self.path.name}: {why}")
                lin.state["prepared"] = self.path.prepare(lin.qweight, self.device)
            else:
                self._prepare_dispatch(lin)
        except (ValueError, KernelReturnCode) as exc:
            raise PathUnavailable(f"{self.mode}: cannot prepare {lin.name} "
                                  f"(K={lin.K}, N={lin.N}, group_size={lin.qweight.group_size}): "
                                  f"{exc}") from None
        self._sync()
        self.prepare_seconds += time.perf_counter() - t0
        self.linears.append(lin)

    def _prepare_dispatch(self, lin: QuantLinear) -> None:
        native = self.native.prepare(lin.qweight, self.device)
        lin.state["native"] = native
        marlin: Prepared | None = None
        w = lin.qweight
        if (self.settings.enabled() and self.marlin_reason is None and not w.exact_int4
                and w.bits == 4 and dsp.packable(w.K, w.N)):
            try:
                marlin = self.marlin.prepare(w, self.device)
            except MarlinPackError as exc:
                lin.state["pack_error"] = f"{lin.name}: {exc}"
        lin.state["marlin"] = marlin
        lin.state["qg"] = QuantGemm(
            w, self.device, settings=self.settings, marlin_pack=marlin is not None,
            capability=self.capability, marlin_reason=self.marlin_reason,
            marlin_call=self._marlin_call(lin, marlin),
            native_call=lambda A, out: self.native.run(native, A, out))

    def _marlin_call(self, lin: QuantLinear, prep: Prepared | None):
        def call(A: torch.Tensor, out: torch.Tensor, gs: int) -> int:
            if prep is None:  # never reached: the dispatcher sees no pack
                raise RuntimeError(f"{lin.name}: Marlin called without a pack")
            if self.device.type == "cuda":
                st = prep.state
                return marlin_mm_asymmetric(A, st["pack"], out, st["workspace"], st["provider"], gs)
            rc = dsp.expected_marlin_rc(A.shape[0], lin.N, lin.K, gs)
            if rc == 0:
                self.marlin.run(prep, A, out)
            return rc

        return call

    def prepare_swiglu(self, gate: QuantLinear, up: QuantLinear) -> None:
        """Load-time work for a gate/up pair (the fused native weight in fused modes)."""
        if not self.fused_swiglu or "fused" in gate.state:
            return
        t0 = time.perf_counter()
        gate.state["fused"] = self.native.prepare(concat_n(gate.qweight, up.qweight), self.device)
        self._sync()
        self.prepare_seconds += time.perf_counter() - t0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ calls
    def gemm(self, lin: QuantLinear, x: torch.Tensor) -> torch.Tensor:
        """[M, K] (any float dtype) -> [M, N] fp32, through the mode's path."""
        M = x.shape[0]
        if self.mode == REFERENCE:
            self.records.append(CallRecord(lin.name, REFERENCE))
            return x.float() @ lin.state["W"]
        if self.path is not None:
            prep = lin.state["prepared"]
            out = torch.empty(M, lin.N, dtype=prep.output_dtype, device=self.device)
            self.path.run(prep, x.to(prep.input_dtype).contiguous(), out)
            self.records.append(CallRecord(lin.name, self.mode))
            return out.float()
        out = torch.empty(M, lin.N, dtype=torch.float16, device=self.device)
        rec = lin.state["qg"](x.to(torch.float16).contiguous(), out)
        self.records.append(CallRecord(lin.name, rec.path, rec.fallback_reason))
        return out.float()

    def swiglu(self, gate: QuantLinear, up: QuantLinear, x: torch.Tensor) -> torch.Tensor:
        """silu(gate(x)) * up(x): fused native in ``dispatch``/``dispatch_off``, else two GEMMs."""
        if not self.fused_swiglu:
            return F.silu(gate(x)) * up(x)
        if "fused" not in gate.state:
            self.prepare_swiglu(gate, up)
        fused: Prepared = gate.state["fused"]
        A = x.reshape(-1, gate.K).to(torch.float16).contiguous()
        out = torch.empty(A.shape[0], 2 * gate.N, dtype=torch.float16, device=self.device)
        self.native.run(fused, A, out)
        self.records += [CallRecord(gate.name, dsp.PATH_NATIVE, FUSED_REASON),
                         CallRecord(up.name, dsp.PATH_NATIVE, FUSED_REASON)]
        g, u = out.float().split(gate.N, dim=1)
        g = g if gate.bias is None else g + gate.bias
        u = u if up.bias is None else u + up.bias
        return (F.silu(g) * u).reshape(*x.shape[:-1], gate.N)

    # ------------------------------------------------------------------ reporting
    def reset_calls(self) -> None:
        self.records.clear()

    def implementation(self) -> str:
        if self.mode == FLOAT:
            return "the model's own float weights in fp32, nothing quantized"
        if self.mode == REFERENCE:
            return "fp32 torch matmul on the exactly dequantized weight (fp32 activations)"
        if self.path is not None:
            return self.path.implementation(self.device)
        swiglu = ("SwiGLU fused native (modelled: one native_int4 GEMM over [gate|up], "
                  "then SiLU*mul)"
                  if self.fused_swiglu else
                  "SwiGLU Marlin pair dispatch (two quant_gemm calls, then SiLU*mul)")
        onoff = "on" if self.settings.enabled() else "off"
        if self.device.type == "cuda":
            where = "on this GPU"
        else:
            where = (f"modelling an SM {self.capability[0]}.{self.capability[1]} GPU on the CPU "
                     f"(native = {self.native.implementation(self.device)}; Marlin = "
                     f"{self.marlin.implementation(self.device)}; "
                     "rc predicted by expected_marlin_rc)")
        return f"TinyLoop quant_gemm model, Marlin dispatch {onoff}, {swiglu}, {where}"

    def report(self) -> DispatchReport:
        calls = Counter(r.path for r in self.records)
        falls = Counter(r.reason for r in self.records if r.reason)
        extra = pack = packed = 0
        for lin in self.linears:
            for key in ("prepared", "native", "fused"):
                p = lin.state.get(key)
                extra += p.extra_bytes if isinstance(p, Prepared) else 0
            if lin.state.get("W") is not None:
                extra += lin.state["W"].numel() * 4
            m = lin.state.get("marlin")
            if isinstance(m, Prepared):
                packed += 1
                pack += m.extra_bytes
                extra += m.extra_bytes
        return DispatchReport(self.mode, self.implementation(), len(self.linears), packed,
                              tuple(sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))),
                              tuple(sorted(falls.items(), key=lambda kv: (-kv[1], kv[0]))),
                              extra, pack, self.prepare_seconds,
                              tuple(lin.state["pack_error"] for lin in self.linears
                                    if "pack_error" in lin.state))


class QuantFactory:
    """``transformer.LinearFactory`` building ``QuantLinear`` modules from named weights."""

    def __init__(self, weights: dict[str, QuantizedWeight], runtime: QuantRuntime) -> None:
        self.weights, self.runtime = weights, runtime

    def linear(self, name: str, K: int, N: int) -> nn.Module:
        w = self.weights.get(name)
        if w is None:
            raise ValueError(f"no quantized weight named {name!r}")
        if (w.K, w.N) != (K, N):
            raise ValueError(f"{name}: weight is K={w.K} x N={w.N}, the model needs {K} x {N}")
        return QuantLinear(name, w, self.runtime)

    def swiglu(self, gate: nn.Module, up: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return self.runtime.swiglu(gate, up, x)
