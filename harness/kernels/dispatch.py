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

The model is a pure function of (case, environment facts): ``DispatchEnv.detect`` gathers
the facts once (the GPU's capability, the environment variables and API toggle resolved
into ``DispatchSettings``), ``decide_case(case, env)`` / ``decide(traits, M, capability,
settings)`` decide from them alone. It imports no path module: what it knows of Marlin is
``harness.kernels.marlin.facts`` (the launcher's status model, the -1 translation, the
packer's shape limits). ``harness.kernels.quant_gemm.QuantGemm`` executes a decision with
the real paths.

Policy dispatch: with ``HARNESS_DISPATCH_POLICY=policy/sm90.json`` (or
``DispatchSettings.policy``) the model dispatches by a measured policy (``harness
policy``, ``results.policy_file``): the class of the case's shape and M names the path
(its decision in the rows' ``fallback_reason``: ``policy: winner of N=... M<=16, lead
+12.0%``); a shape the policy has no class for, or whose runs disagree, keeps the rules. A
policy of another arch or GPU model is refused in one line.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

import torch

from harness.cases.case import GemmCase
from harness.cases.data import QuantizedWeight
from harness.results.policy_file import Policy, PolicyError, read_policy

from .base import PAIR_KIND
from .marlin.facts import expected_marlin_rc, marlin_groupsize_for, packable, rc_meaning

__all__ = [
    "FUSED_NAME", "FUSED_REASON", "HOPPER", "MARLIN_ENV", "PATH_FP16", "PATH_MARLIN", "POLICY_ENV",
    "PATH_NATIVE", "SM90_ENV", "TINYLOOP_MARLIN_ARCHS", "Decision", "DispatchEnv", "by_policy",
    "DispatchSettings", "WeightTraits", "decide", "decide_case", "decide_for_case",
    "expected_marlin_rc", "marlin_arch_reason", "marlin_failures", "marlin_groupsize_for",
    "packable", "rc_meaning", "set_marlin_dispatch",
]

MARLIN_ENV = "TINYLOOP_USE_MARLIN"
SM90_ENV = "HARNESS_MARLIN_SM90"
#: A policy file (``harness policy``): the dispatcher model dispatches by it.
POLICY_ENV = "HARNESS_DISPATCH_POLICY"
TINYLOOP_MARLIN_ARCHS: tuple[tuple[int, int], ...] = ((8, 0), (8, 6), (8, 9))
HOPPER = (9, 0)
PATH_FP16, PATH_MARLIN, PATH_NATIVE = "fp16_cache", "marlin_asym", "native_int4"
#: TinyLoop's ``quant_swiglu``: the fused gate+up native kernel, what a pair case runs.
FUSED_NAME = "native_int4_fused"
FUSED_REASON = "quant_swiglu (fused gate+up native kernel) is not Marlin-dispatched"

_API_TOGGLE: bool | None = None


def set_marlin_dispatch(enabled: bool | None) -> None:
    """TinyLoop's ``tl.set_marlin_dispatch``; None returns control to the environment."""
    global _API_TOGGLE
    _API_TOGGLE = None if enabled is None else bool(enabled)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip() == "1"


@dataclass(frozen=True)
class DispatchSettings:
    """The dispatcher's knobs. None fields are read from the environment / API toggle
    (``resolved()`` reads them once; a resolved copy makes the model pure)."""

    marlin_enabled: bool | None = None
    allow_sm90: bool | None = None
    marlin_archs: tuple[tuple[int, int], ...] = TINYLOOP_MARLIN_ARCHS
    translate_per_row: bool = True      # False: TinyLoop's first defect (groupsize K, rc 2)
    min_bt: int = 16
    tile: int = 128
    #: dispatch by a measured policy (``harness policy``) instead of the rules; None: read
    #: ``HARNESS_DISPATCH_POLICY`` (a policy file) when resolved
    policy: Policy | None = None

    def enabled(self) -> bool:
        if self.marlin_enabled is not None:
            return self.marlin_enabled
        if _API_TOGGLE is not None:
            return _API_TOGGLE
        return _env_flag(MARLIN_ENV)

    def sm90_allowed(self) -> bool:
        return self.allow_sm90 if self.allow_sm90 is not None else _env_flag(SM90_ENV)

    def resolved(self) -> DispatchSettings:
        """These settings with every environment-dependent field read now."""
        return replace(self, marlin_enabled=self.enabled(), allow_sm90=self.sm90_allowed(),
                       policy=self.policy or env_policy())

    def archs(self) -> tuple[tuple[int, int], ...]:
        extra = (HOPPER,) if self.sm90_allowed() and HOPPER not in self.marlin_archs else ()
        return tuple(self.marlin_archs) + extra


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


@dataclass(frozen=True)
class DispatchEnv:
    """The environment facts the dispatcher reads: the GPU's capability (None: no CUDA
    GPU), the resolved settings and, when known, why Marlin cannot run here."""

    capability: tuple[int, int] | None
    settings: DispatchSettings
    marlin_reason: str | None = None

    @classmethod
    def detect(cls, device: torch.device, settings: DispatchSettings | None = None,
               marlin_reason: str | None = None) -> DispatchEnv:
        """The facts of ``device`` and this process's environment, read once; a dispatch
        policy of another arch or GPU model is refused here (``PolicyError``, one line)."""
        resolved = (settings or DispatchSettings()).resolved()
        cap = _capability(device)
        if resolved.policy is not None:
            arch = f"sm{cap[0]}{cap[1]}" if cap else "cpu"
            name = torch.cuda.get_device_name(device) if cap else "cpu"
            resolved.policy.check_device(arch, name, source=f"dispatch policy ({POLICY_ENV})")
        return cls(cap, resolved, marlin_reason)


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


@dataclass(frozen=True)
class Decision:
    """The dispatcher's choice before the call. ``failed`` lists every failed precondition."""

    path: str
    marlin_groupsize: int | None = None
    failed: tuple[str, ...] = ()
    arch_note: str = ""
    policy: str = ""          # dispatched by a policy: which class and decision, or why not

    @property
    def fallback_reason(self) -> str:
        return "; ".join((*self.failed, self.policy) if self.policy else self.failed)


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
    """TinyLoop's branch order, before any kernel runs (pure for resolved ``settings``)."""
    settings = settings or DispatchSettings()
    if traits.has_fp16_cache:
        return Decision(PATH_FP16)
    failed, note = marlin_failures(traits, M, capability, settings, marlin_reason)
    if failed:
        return Decision(PATH_NATIVE, None, failed, note)
    gs = marlin_groupsize_for(traits.group_size, traits.K, settings.translate_per_row)
    return Decision(PATH_MARLIN, gs, (), note)


def decide_case(case: GemmCase, env: DispatchEnv) -> Decision:
    """What TinyLoop would run for ``case`` given the environment facts ``env`` (pure).

    The weight carries no fp16 cache and has a Marlin pack when the packer takes its shape.
    When Marlin would be called, its status is predicted with ``expected_marlin_rc``; a
    non-zero one is reported as the fallback it causes. A SwiGLU pair runs TinyLoop's fused
    ``quant_swiglu``, never Marlin.
    """
    if case.kind == PAIR_KIND:
        return Decision(FUSED_NAME, None, (FUSED_REASON,))
    traits = WeightTraits(case.K, case.N, case.group_size, has_marlin_pack=packable(case.K, case.N))
    d = decide(traits, case.M, env.capability, env.settings, env.marlin_reason)
    if d.path == PATH_MARLIN:
        rc = expected_marlin_rc(case.M, case.N, case.K, d.marlin_groupsize)
        if rc:
            d = Decision(PATH_NATIVE, d.marlin_groupsize,
                         (f"Marlin returned rc={rc} (predicted: {rc_meaning(rc)})",),
                         d.arch_note)
    return by_policy(case, d, env.settings.policy)


def by_policy(case: GemmCase, rules: Decision, policy: Policy | None) -> Decision:
    """The policy's path for ``case`` where it names one (a class of the case's shape and
    M bucket, decided ``winner`` or ``tie``); else the rules' decision, saying why."""
    if policy is None:
        return rules
    c = policy.lookup(case.kind, case.N, case.K, case.group_size, case.M)
    if c is None or not c.path:
        why = ("no class of this shape" if c is None
               else "its runs disagree" if c.decision == "disagree" else "no correct path")
        return replace(rules, policy=f"policy: {why}; the rules decide")
    lead = f", lead {c.lead:+.1%}" if c.lead == c.lead and c.lead != float("inf") else ""
    gs = marlin_groupsize_for(case.group_size, case.K, True) if c.path == PATH_MARLIN else None
    return Decision(c.path, gs, (), rules.arch_note,
                    policy=f"policy: {c.decision} of {c.label}{lead}")


def env_policy() -> Policy | None:
    """The policy ``HARNESS_DISPATCH_POLICY`` names, or None (read once per file version)."""
    path = os.environ.get(POLICY_ENV, "").strip()
    if not path:
        return None
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        raise PolicyError(f"{POLICY_ENV}={path}: no such policy file") from None
    return _read_policy(path, stamp)


@functools.lru_cache(maxsize=4)
def _read_policy(path: str, stamp: int) -> Policy:
    return read_policy(path)


def decide_for_case(case: GemmCase, device: torch.device,
                    settings: DispatchSettings | None = None) -> Decision:
    """``decide_case`` with the facts of ``device`` and this process (the runner's column)."""
    return decide_case(case, DispatchEnv.detect(device, settings))
