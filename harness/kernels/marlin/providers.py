"""Marlin providers: where the symmetric Marlin kernel comes from, and what it computes.

Extension point: a provider is one ``MarlinProvider`` subclass registered in ``PROVIDERS``.
It declares its implied dequantization per mode (``formula(marlin_groupsize)``, one of
``harness.kernels.marlin.pack.FORMULAS``), from which the pack derives the correction's
delta = W_asym - W_implied; never assume (q - 8) * s. ``gemm`` runs the symmetric kernel
into C and RETURNS Marlin's status (0 ok, 1 problem shape, 2 no kernel for the
configuration; ``facts.RC_MEANING``) instead of raising, because TinyLoop's dispatcher
falls back on it.

* ``quanto``: optimum-quanto's Marlin source (Frantar's kernel plus a scaled zero point
  ``sz``: the kernel's grouped dequantization is q * s + sz), compiled into the harness
  extension (``harness.kernels.build``). Grouped: we pass sz = -8 * s, which is upstream
  Marlin's (q - 8) * s bit for bit, so formula "q_minus_8". Per-column (groupsize -1):
  the kernel accumulates q (no -8), ignores sz and multiplies by s at the end, so
  formula "q_times_s" and delta = zero.
* ``upstream``: IST-DASLab's ``marlin`` package (``marlin.mul``), when a user installed
  it. Textbook (q - 8) * s in both modes. Its ``mul`` raises instead of returning the
  status; the message is mapped back to 1 or 2. It derives groupsize from the scales'
  shape (one row -> -1), so it cannot be handed an untranslated per-row groupsize.

``new_workspace`` allocates Marlin's lock workspace (both Marlin paths and the
dispatcher's executor use it).
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod

import torch

from ..build import extension, marlin_unavailable_reason
from .facts import DEFAULT_MAX_PAR, MIN_CAPABILITY, workspace_entries
from .pack import MarlinPack, scaled_zero

PROVIDER_ENV = "HARNESS_MARLIN_PROVIDER"


def new_workspace(N: int, device: torch.device, max_par: int = DEFAULT_MAX_PAR) -> torch.Tensor:
    """Marlin's lock workspace: int32 zeros of N / 128 * max_par (Marlin leaves it zeroed)."""
    return torch.zeros(max(1, workspace_entries(N, max_par)), dtype=torch.int32, device=device)


class MarlinProvider(ABC):
    """One source of Marlin's symmetric INT4 x FP16 kernel (see the module docstring)."""

    name: str = ""
    description: str = ""

    @abstractmethod
    def formula(self, marlin_groupsize: int) -> str:
        """The implied dequantization for the groupsize passed to the kernel."""

    @abstractmethod
    def unavailable_reason(self, device: torch.device) -> str | None:
        """None when ``gemm`` can run on ``device``; otherwise why not."""

    @abstractmethod
    def gemm(self, A: torch.Tensor, pack: MarlinPack, C: torch.Tensor, workspace: torch.Tensor,
             groupsize: int, max_par: int = DEFAULT_MAX_PAR, sz: torch.Tensor | None = None) -> int:
        """Symmetric Marlin: C = A @ W_implied (fp16). Returns Marlin's status code."""

    def _gpu_reason(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return f"Marlin ({self.name}) runs on CUDA GPUs only, not {device.type!r}"
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch"
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < MIN_CAPABILITY:
            need = ".".join(map(str, MIN_CAPABILITY))
            return (f"Marlin needs SM {need} or newer (mma.sync m16n8k16, cp.async); "
                    f"this GPU is SM {major}.{minor}")
        return None


class QuantoProvider(MarlinProvider):
    name = "quanto"
    description = "optimum-quanto's marlin_cuda_kernel.cu compiled into the harness extension"

    def formula(self, marlin_groupsize: int) -> str:
        return "q_times_s" if marlin_groupsize == -1 else "q_minus_8"

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self._gpu_reason(device) or marlin_unavailable_reason()

    def gemm(self, A, pack, C, workspace, groupsize, max_par=DEFAULT_MAX_PAR, sz=None) -> int:
        # per-column ignores sz, grouped needs -8 * s: built on demand where the pack has none
        szt = scaled_zero(pack) if sz is None else sz
        return int(extension().marlin_gemm(A, pack.B, C, pack.scales, szt, workspace, groupsize,
                                           -1, -1, -1, max_par))


class UpstreamProvider(MarlinProvider):
    name = "upstream"
    description = "IST-DASLab's marlin package (marlin.mul)"

    def formula(self, marlin_groupsize: int) -> str:
        return "q_minus_8"

    def _module(self):
        return importlib.import_module("marlin")   # optional dependency: IST-DASLab's package

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = self._gpu_reason(device)
        if reason:
            return reason
        try:
            mod = self._module()
        except ImportError as exc:
            return (f"upstream Marlin is not installed (import marlin failed: {exc}); "
                    "see github.com/IST-DASLab/marlin")
        if not hasattr(mod, "mul"):
            return "the installed 'marlin' module has no mul(); it is not IST-DASLab's Marlin"
        return marlin_unavailable_reason()  # the correction kernels come from our extension

    def gemm(self, A, pack, C, workspace, groupsize, max_par=DEFAULT_MAX_PAR, sz=None) -> int:
        try:
            self._module().mul(A, pack.B, C, pack.scales, workspace, -1, -1, -1, max_par)
        except RuntimeError as exc:
            text = str(exc)
            if "No kernel implementation" in text:
                return 2
            if "not compatible" in text:
                return 1
            raise
        return 0


PROVIDERS: dict[str, MarlinProvider] = {p.name: p for p in (QuantoProvider(), UpstreamProvider())}


def get_provider(name: str | None = None) -> MarlinProvider:
    """A provider by name; None reads ``$HARNESS_MARLIN_PROVIDER`` (default ``quanto``)."""
    name = name or os.environ.get(PROVIDER_ENV, "quanto")
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ValueError(
            f"Marlin provider {name!r} is unknown; valid: {', '.join(PROVIDERS)}") from None
