"""A faithful model of TinyLoop's ``quant_gemm`` dispatcher (seed: "How the dispatcher chooses").

Order: the FP16 body cache if the weight carries one; else Marlin + the asymmetric
correction when ALL of these hold; else native INT4:
  1. bits == 4 and not exact_int4
  2. dispatch enabled: ``TINYLOOP_USE_MARLIN=1`` or ``set_marlin_dispatch(True)`` (the API
     toggle, when set, wins over the environment; TinyLoop's default is off)
  3. the weight has a Marlin pack (made at load time)
  4. Marlin available on this GPU: TinyLoop's list is SM 8.0 / 8.6 / 8.9; SM 9.0 is added
     only by the harness's explicit opt-in (``allow_sm90`` or ``HARNESS_MARLIN_SM90=1``),
     so Marlin can be measured on Hopper; the decision records that it was an opt-in
  5. BT (= M) >= 16
  6. K % 128 == 0 and N % 128 == 0
Per-row weights (group_size == K) are handed to Marlin as groupsize -1. After the call a
non-zero Marlin status also falls back to native INT4, recorded with the status.

The decision logic (``decide``, ``decide_for_case``, ``expected_marlin_rc``) is pure and
CPU-testable; ``QuantGemm`` executes it for one weight and records every call. The first
successful Marlin dispatch of the process is logged on stderr exactly like TinyLoop:
``[marlin] first dispatch ok: BT=... N=... K=... gs=...``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.cases.case import GemmCase
from harness.cases.data import QuantizedWeight

MARLIN_ENV = "TINYLOOP_USE_MARLIN"
SM90_ENV = "HARNESS_MARLIN_SM90"
TINYLOOP_MARLIN_ARCHS: tuple[tuple[int, int], ...] = ((8, 0), (8, 6), (8, 9))
HOPPER = (9, 0)
PATH_FP16, PATH_MARLIN, PATH_NATIVE = "fp16_cache", "marlin_asym", "native_int4"


class UnsupportedCase(ValueError):
    """A path cannot take this particular weight/shape (raised by ``prepare``); one line."""


_API_TOGGLE: bool | None = None
_FIRST_LOGGED = False


def set_marlin_dispatch(enabled: bool | None) -> None:
    """TinyLoop's ``tl.set_marlin_dispatch``; None returns control to the environment."""
    global _API_TOGGLE
    _API_TOGGLE = None if enabled is None else bool(enabled)


def reset_first_dispatch_log() -> None:
    """Forget that the first Marlin dispatch was logged (tests)."""
    global _FIRST_LOGGED
    _FIRST_LOGGED = False


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip() == "1"


@dataclass(frozen=True)
class DispatchSettings:
    """The dispatcher's knobs. None fields are read from the environment / API toggle."""

    marlin_enabled: bool | None = None
    allow_sm90: bool | None = None
    marlin_archs: tuple[tuple[int, int], ...] = TINYLOOP_MARLIN_ARCHS
    translate_per_row: bool = True      # False plants TinyLoop's first defect (rc 2)
    min_bt: int = 16
    tile: int = 128

    def enabled(self) -> bool:
        if self.marlin_enabled is not None:
            return self.marlin_enabled
        if _API_TOGGLE is not None:
            return _API_TOGGLE
        return _env_flag(MARLIN_ENV)

    def sm90_allowed(self) -> bool:
        return self.allow_sm90 if self.allow_sm90 is not None else _env_flag(SM90_ENV)

    def archs(self) -> tuple[tuple[int, int], ...]:
        extra = (HOPPER,) if self.sm90_allowed() and HOPPER not in self.marlin_archs else ()
        return tuple(self.marlin_archs) + extra


@dataclass(frozen=True)
class WeightTraits:
    """What the dispatcher looks at on a weight."""

    K: int
    N: int
    group_size: int
    bits: int = 4
    exact_int4: bool = False
    has_fp16_cache: bool = False
    has_marlin_pack: bool = True

    @classmethod
    def of(cls, weight: QuantizedWeight, has_fp16_cache: bool = False,
           has_marlin_pack: bool = True) -> WeightTraits:
        return cls(weight.K, weight.N, weight.group_size, weight.bits, weight.exact_int4,
                   has_fp16_cache, has_marlin_pack)


def packable(K: int, N: int) -> bool:
    """Whether the load-time Marlin packer takes this shape (K % 16, N % 64)."""
    return K % 16 == 0 and N % 64 == 0


def marlin_groupsize_for(group_size: int, K: int, translate: bool = True) -> int:
    return -1 if translate and group_size == K else group_size


@dataclass(frozen=True)
class Decision:
    """The dispatcher's choice before the call. ``failed`` lists every failed precondition."""

    path: str
    marlin_groupsize: int | None = None
    failed: tuple[str, ...] = ()
    arch_note: str = ""

    @property
    def fallback_reason(self) -> str:
        return "; ".join(self.failed)


def marlin_arch_reason(capability: tuple[int, int] | None,
                       settings: DispatchSettings) -> tuple[str | None, str]:
    """(failure reason or None, note for the results) for Marlin on ``capability``."""
    if capability is None:
        return "Marlin unavailable: no CUDA GPU", ""
    archs = settings.archs()
    cap = tuple(capability)
    label = f"SM {cap[0]}.{cap[1]}"
    if cap not in archs:
        listed = "/".join(f"{a}.{b}" for a, b in TINYLOOP_MARLIN_ARCHS)
        hint = f" (set {SM90_ENV}=1 to opt in)" if cap == HOPPER else ""
        return f"Marlin unavailable on {label} (TinyLoop's list: {listed}){hint}", ""
    note = ""
    if cap not in TINYLOOP_MARLIN_ARCHS:
        note = f"{label} admitted by the harness opt-in, not by TinyLoop's list"
    return None, note


def marlin_failures(traits: WeightTraits, M: int, capability: tuple[int, int] | None,
                    settings: DispatchSettings, marlin_reason: str | None = None
                    ) -> tuple[tuple[str, ...], str]:
    """(every failed Marlin precondition in TinyLoop's order, arch note)."""
    failed: list[str] = []
    if traits.bits != 4:
        failed.append(f"bits={traits.bits} != 4")
    if traits.exact_int4:
        failed.append("weight is exact_int4")
    if not settings.enabled():
        failed.append(f"Marlin dispatch disabled ({MARLIN_ENV}!=1 and no API toggle)")
    if not traits.has_marlin_pack:
        failed.append("weight has no Marlin pack")
    arch_reason, note = marlin_arch_reason(capability, settings)
    if arch_reason:
        failed.append(arch_reason)
    elif marlin_reason:
        failed.append(f"Marlin unavailable: {marlin_reason}")
    if M < settings.min_bt:
        failed.append(f"BT={M} < {settings.min_bt}")
    if traits.K % settings.tile:
        failed.append(f"K={traits.K} % {settings.tile} != 0")
    if traits.N % settings.tile:
        failed.append(f"N={traits.N} % {settings.tile} != 0")
    return tuple(failed), note


def decide(traits: WeightTraits, M: int, capability: tuple[int, int] | None,
           settings: DispatchSettings | None = None, marlin_reason: str | None = None) -> Decision:
    """TinyLoop's branch order, before any kernel runs (pure)."""
    settings = settings or DispatchSettings()
    if traits.has_fp16_cache:
        return Decision(PATH_FP16)
    failed, note = marlin_failures(traits, M, capability, settings, marlin_reason)
    if failed:
        return Decision(PATH_NATIVE, None, failed, note)
    gs = marlin_groupsize_for(traits.group_size, traits.K, settings.translate_per_row)
    return Decision(PATH_MARLIN, gs, (), note)


# Marlin's kernel table (marlin_cuda's CALL_IF list): (thread_m_blocks, thread_n_blocks,
# thread_k_blocks) x group_blocks in {-1, 8}.
_MARLIN_TILES = {(1, 8, 8), (1, 16, 4), (2, 16, 4), (3, 16, 4), (4, 16, 4)}
_MARLIN_GROUP_BLOCKS = {-1, 8}


def expected_marlin_rc(M: int, N: int, K: int, groupsize: int, max_par: int = 16) -> int:
    """The status marlin_cuda returns for this problem with default thread sizes (a model)."""
    thread_k, thread_n = (128, 128) if M <= 16 else (64, 256)
    group_blocks = -1 if groupsize == -1 else groupsize // 16
    if N % thread_n or K % thread_k or (group_blocks != -1 and K % group_blocks):
        return 1
    if M == 0:
        return 0
    tot = -(-M // 16)
    pad = 16 * tot - M
    rc, i = 0, 0
    while i < tot:
        m_blocks = tot - i
        if m_blocks > 4:
            par = min(max((16 * m_blocks - pad) // 64, 1), max_par)
            i += 4 * (par - 1)
            m_blocks = 4
        if (m_blocks, thread_n // 16, thread_k // 16) not in _MARLIN_TILES \
                or group_blocks not in _MARLIN_GROUP_BLOCKS:
            rc = 2
        i += 4
    return rc


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def decide_for_case(case: GemmCase, device: torch.device,
                    settings: DispatchSettings | None = None) -> Decision:
    """What TinyLoop would run for ``case`` on ``device`` (the runner's dispatch column).

    The weight carries no fp16 cache and has a Marlin pack when the packer takes its shape.
    When Marlin would be called, its status is predicted with ``expected_marlin_rc``; a
    non-zero one is reported as the fallback it causes.
    """
    if case.kind == "swiglu_pair":        # TinyLoop's quant_swiglu: the fused native kernel
        from .swiglu_pair import FUSED_NAME, FUSED_REASON

        return Decision(FUSED_NAME, None, (FUSED_REASON,))
    settings = settings or DispatchSettings()
    traits = WeightTraits(case.K, case.N, case.group_size, has_marlin_pack=packable(case.K, case.N))
    d = decide(traits, case.M, _capability(device), settings)
    if d.path == PATH_MARLIN:
        rc = expected_marlin_rc(case.M, case.N, case.K, d.marlin_groupsize)
        if rc:
            return Decision(PATH_NATIVE, d.marlin_groupsize,
                            (f"Marlin returned rc={rc} (predicted: {_rc_text(rc)})",), d.arch_note)
    return d


def _rc_text(rc: int) -> str:
    from .marlin_providers import rc_meaning

    return rc_meaning(rc)


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


@dataclass
class QuantGemm:
    """``quant_gemm`` for one weight on one device, recording every call in ``records``.

    ``marlin_call(A, out, groupsize) -> rc`` and ``native_call(A, out)`` default to the
    harness paths (``marlin_asym``'s ``marlin_mm_asymmetric`` and ``native_int4``); tests
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
        from .marlin_pack import MarlinPackError

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
            self._prepared[PATH_FP16] = self._path(PATH_FP16).prepare(self.weight, self.device)

    # -- defaults backed by the harness paths ----------------------------------------
    @staticmethod
    def _path(name: str):
        from . import registry_load
        from .base import PATHS

        registry_load.load_all()
        return PATHS.get(name)

    def _default_marlin_reason(self) -> str | None:
        return self._path(PATH_MARLIN).unavailable_reason(self.device) if self.device.type == "cuda" \
            else "no CUDA GPU"

    def _prepare_marlin(self) -> None:
        from .marlin_asym import new_workspace
        from .marlin_pack import marlin_pack_asymmetric
        from .marlin_providers import get_provider

        gs = marlin_groupsize_for(self.weight.group_size, self.weight.K, self.settings.translate_per_row)
        pack = marlin_pack_asymmetric(self.weight, formula=get_provider().formula(gs))
        self._prepared["pack"] = pack
        self._prepared["workspace"] = new_workspace(self.weight.N, self.device)

    def _run_marlin(self, A: torch.Tensor, out: torch.Tensor, gs: int) -> int:
        if self.marlin_call is not None:
            return int(self.marlin_call(A, out, gs))
        from .marlin_asym import marlin_mm_asymmetric

        return marlin_mm_asymmetric(A, self._prepared["pack"], out, self._prepared["workspace"],
                                    groupsize=gs)

    def _run_native(self, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.native_call is not None:
            return self.native_call(A, out)
        if PATH_NATIVE not in self._prepared:
            self._prepared[PATH_NATIVE] = self._path(PATH_NATIVE).prepare(self.weight, self.device)
        return self._path(PATH_NATIVE).run(self._prepared[PATH_NATIVE], A, out)

    # -- the call ------------------------------------------------------------------------
    def __call__(self, A: torch.Tensor, out: torch.Tensor) -> DispatchRecord:
        global _FIRST_LOGGED
        w = self.weight
        M = A.shape[0]
        traits = WeightTraits.of(w, self.fp16_cache, self._has_pack)
        d = decide(traits, M, self.capability, self.settings, self.marlin_reason)
        base = dict(M=M, N=w.N, K=w.K, group_size=w.group_size, arch_note=d.arch_note)
        if d.path == PATH_FP16:
            self._path(PATH_FP16).run(self._prepared[PATH_FP16], A, out)
            rec = DispatchRecord(path=PATH_FP16, **base)
        elif d.path == PATH_MARLIN:
            rc = self._run_marlin(A, out, d.marlin_groupsize)
            if rc == 0:
                if not _FIRST_LOGGED:
                    print(f"[marlin] first dispatch ok: BT={M} N={w.N} K={w.K} gs={d.marlin_groupsize}",
                          file=sys.stderr, flush=True)
                    _FIRST_LOGGED = True
                rec = DispatchRecord(path=PATH_MARLIN, marlin_groupsize=d.marlin_groupsize, marlin_rc=0, **base)
            else:
                self._run_native(A, out)
                rec = DispatchRecord(path=PATH_NATIVE, marlin_groupsize=d.marlin_groupsize, marlin_rc=rc,
                                     fallback_reason=f"Marlin returned rc={rc} ({_rc_text(rc)})", **base)
        else:
            self._run_native(A, out)
            rec = DispatchRecord(path=PATH_NATIVE, fallback_reason=d.fallback_reason, **base)
        self.records.append(rec)
        return rec
