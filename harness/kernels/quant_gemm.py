"""``QuantGemm``: TinyLoop's ``quant_gemm`` executed for one weight, with the real paths.

The decision is ``harness.kernels.dispatch.decide`` (the pure model); this module runs it:
the fp16 cache path, Marlin + the correction (``marlin.asym.marlin_mm_asymmetric``) or
native INT4, and after a non-zero Marlin status the native fallback, recording every call
in ``records``. The first successful Marlin dispatch of the process is logged on stderr
exactly like TinyLoop: ``[marlin] first dispatch ok: BT=... N=... K=... gs=...``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.cases.data import QuantizedWeight

from .base import GemmPath
from .dispatch import (
    PATH_FP16,
    PATH_MARLIN,
    PATH_NATIVE,
    DispatchSettings,
    WeightTraits,
    _capability,
    decide,
    marlin_groupsize_for,
    packable,
    rc_meaning,
)
from .marlin.asym import marlin_mm_asymmetric
from .marlin.pack import MarlinPackError, marlin_pack_asymmetric
from .marlin.providers import get_provider, new_workspace
from .registry_load import load_all

_FIRST_LOGGED = False


def reset_first_dispatch_log() -> None:
    """Forget that the first Marlin dispatch was logged (tests)."""
    global _FIRST_LOGGED
    _FIRST_LOGGED = False


@dataclass(frozen=True)
class DispatchRecord:
    """One quant_gemm call: which path ran and, for a fallback, why."""

    M: int
    N: int
    K: int
    group_size: int
    path: str
    marlin_groupsize: int | None = None
    marlin_rc: int | None = None
    fallback_reason: str = ""
    arch_note: str = ""


MarlinCall = Callable[[torch.Tensor, torch.Tensor, int], int]
GemmCall = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _path(name: str) -> GemmPath:
    return load_all().get(name)


@dataclass
class QuantGemm:
    """``quant_gemm`` for one weight on one device, recording every call in ``records``.

    ``marlin_call(A, out, groupsize) -> rc`` and ``native_call(A, out)`` default to the
    harness paths (``marlin_mm_asymmetric`` on a Marlin pack, and ``native_int4``); tests
    inject fakes. ``capability`` and ``marlin_reason`` override what the device reports.
    """

    weight: QuantizedWeight
    device: torch.device
    settings: DispatchSettings = field(default_factory=DispatchSettings)
    fp16_cache: bool = False
    marlin_pack: bool = True
    capability: tuple[int, int] | None = None
    marlin_reason: str | None = None
    marlin_call: MarlinCall | None = None
    native_call: GemmCall | None = None
    records: list[DispatchRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.weight = self.weight.to(self.device)
        if self.capability is None:
            self.capability = _capability(self.device)
        self._prepared: dict[str, object] = {}
        self._has_pack = False
        if self.marlin_pack and self.marlin_call is None:
            self.marlin_reason = self.marlin_reason or self._default_marlin_reason()
            if self.marlin_reason is None:
                try:
                    self._prepare_marlin()
                    self._has_pack = True
                except MarlinPackError:
                    self._has_pack = False
        elif self.marlin_pack:
            self._has_pack = packable(self.weight.K, self.weight.N)
        if self.fp16_cache:
            self._prepared[PATH_FP16] = _path(PATH_FP16).prepare(self.weight, self.device)

    # -- defaults backed by the harness paths ----------------------------------------
    def _default_marlin_reason(self) -> str | None:
        return _path(PATH_MARLIN).unavailable_reason(self.device) if self.device.type == "cuda" \
            else "no CUDA GPU"

    def _prepare_marlin(self) -> None:
        gs = marlin_groupsize_for(self.weight.group_size, self.weight.K,
                                  self.settings.translate_per_row)
        pack = marlin_pack_asymmetric(self.weight, formula=get_provider().formula(gs))
        self._prepared["pack"] = pack
        self._prepared["workspace"] = new_workspace(self.weight.N, self.device)

    def _run_marlin(self, A: torch.Tensor, out: torch.Tensor, gs: int) -> int:
        if self.marlin_call is not None:
            return int(self.marlin_call(A, out, gs))
        return marlin_mm_asymmetric(A, self._prepared["pack"], out, self._prepared["workspace"],
                                    groupsize=gs)

    def _run_native(self, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.native_call is not None:
            return self.native_call(A, out)
        if PATH_NATIVE not in self._prepared:
            self._prepared[PATH_NATIVE] = _path(PATH_NATIVE).prepare(self.weight, self.device)
        return _path(PATH_NATIVE).run(self._prepared[PATH_NATIVE], A, out)

    # -- the call ------------------------------------------------------------------------
    def __call__(self, A: torch.Tensor, out: torch.Tensor) -> DispatchRecord:
        global _FIRST_LOGGED
        w = self.weight
        M = A.shape[0]
        traits = WeightTraits.of(w, self.fp16_cache, self._has_pack)
        d = decide(traits, M, self.capability, self.settings, self.marlin_reason)
        base = dict(M=M, N=w.N, K=w.K, group_size=w.group_size, arch_note=d.arch_note)
        if d.path == PATH_FP16:
            _path(PATH_FP16).run(self._prepared[PATH_FP16], A, out)
            rec = DispatchRecord(path=PATH_FP16, **base)
        elif d.path == PATH_MARLIN:
            rc = self._run_marlin(A, out, d.marlin_groupsize)
            if rc == 0:
                if not _FIRST_LOGGED:
                    print(f"[marlin] first dispatch ok: BT={M} N={w.N} K={w.K} "
                          f"gs={d.marlin_groupsize}", file=sys.stderr, flush=True)
                    _FIRST_LOGGED = True
                rec = DispatchRecord(path=PATH_MARLIN, marlin_groupsize=d.marlin_groupsize,
                                     marlin_rc=0, **base)
            else:
                self._run_native(A, out)
                rec = DispatchRecord(path=PATH_NATIVE, marlin_groupsize=d.marlin_groupsize,
                                     marlin_rc=rc,
                                     fallback_reason=f"Marlin returned rc={rc} ({rc_meaning(rc)})",
                                     **base)
        else:
            self._run_native(A, out)
            rec = DispatchRecord(path=PATH_NATIVE, fallback_reason=d.fallback_reason, **base)
        self.records.append(rec)
        return rec
