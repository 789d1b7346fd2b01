"""Path ``marlin_asym``: unmodified symmetric Marlin + TinyLoop's asymmetric correction.

C = Marlin(A, W_implied) + a_group_sum(A) @ delta, delta = W_asym - W_implied per
(group, column), W_implied being the provider's own dequantization
(``harness.kernels.marlin.providers``). ``marlin_mm_asymmetric`` zeroes C, runs Marlin,
then the two correction kernels (``csrc/correction.cu``), and returns Marlin's status;
the correction is skipped when it is non-zero and ``run`` raises ``KernelReturnCode``.

Provider ``quanto`` (default; ``$HARNESS_MARLIN_PROVIDER=upstream`` picks the other): we
compile quanto's ``marlin_cuda_kernel.cu`` ourselves and call its C entry ``marlin_cuda``
through a small binding, because quanto's public op ``torch.ops.quanto.gemm_f16i4_marlin``
raises on a non-zero status instead of returning it, and the dispatcher needs the status
(rc 2 is how the missing per-row -1 translation showed up in TinyLoop). Compiling just the
Marlin file with our sources takes ~25 s on an H200 host (measured: 24.3 s / 24.8 s, whole
harness extension, sm_90) instead of quanto's whole extension (~93 s), and never writes into
quanto's package folder.

On a CPU the path is an emulation, labelled as such: the packed weight is unpacked into
W_implied (float64, at prepare), C = A @ W_implied + the Python correction.

Correction variants (``harness.kernels.marlin.variants``): ``two_kernel`` is the seed's
design above; the others (lean two-kernel call, CUDA graph, side stream, fused tiled
kernel, fused with programmatic dependent launch) go through one C++ entry,
``marlin_asym_variant``, that launches Marlin and the correction with no per-call
allocation. Which one runs: ``MarlinAsymPath(variant=...)``, else
``$HARNESS_CORRECTION_VARIANT``, else ``variants.DEFAULT_VARIANT`` (``auto`` picks per
shape class from ``variants.AUTO_BY_CLASS``). Only the quanto provider runs the new ones.

Everything a call does is decided by its arguments and the path object, never by module
state. ``MarlinAsymPath(correction_flags=...)`` is passed to the CUDA correction as its
``flags`` argument (``CORRECTION_FLAG_BITS``: bit 0 fp16 accumulation, bit 1 skip the
last 128-column tile, bit 2 do not regrow the scratch; every variant honours bits 0 and 1,
bit 2 concerns the seed's scratch only). It is 0 in the product; the planted-defect tests
build paths with a bit set. ``pack_weight`` and ``kernel_groupsize`` are the load-time
seams a subclass may override (the packed weight, the groupsize handed to the kernel).
"""

from __future__ import annotations

import torch

from harness.cases.data import QuantizedWeight

from ..base import GemmPath, KernelReturnCode, Prepared, int4_weight_bytes
from ..build import extension
from ..reference import apply_marlin_correction, implied_weight
from .facts import (
    DEFAULT_MAX_PAR,
    MARLIN_NONDETERMINISM,
    MARLIN_SPLIT_K_BOUND,
    MARLIN_SPLIT_K_REASON,
    MIN_CAPABILITY,
    QUANTO_PER_COLUMN_BOUND,
    QUANTO_PER_COLUMN_REASON,
    marlin_unsupported_reason,
    marlin_weight_reason,
    rc_meaning,
)
from .pack import MarlinPack, marlin_groupsize, marlin_pack_asymmetric, scaled_zero
from .providers import get_provider, new_workspace
from .variants import (
    DEFAULT_VARIANT,
    EXT_IDS,
    VARIANTS,
    CorrectionVariantError,
    check_variant_name,
    concrete_variant,
    describe,
    ext_id,
    resolve_variant,
    variant_requested,
)

__all__ = ["DEFAULT_VARIANT", "CORRECTION_FLAG_BITS", "MarlinAsymPath", "choose_variant",
           "emulate_asymmetric", "marlin_mm_asymmetric", "new_workspace"]

#: Bits of the CUDA correction's ``flags`` argument (``CorrectionFlags`` in
#: csrc/harness_kernels.h); each one makes the correction wrong in a known way.
CORRECTION_FLAG_BITS = {"fp16_accumulation": 1, "skip_last_n_tile": 2, "no_regrow": 4}
_ALL_FLAGS = sum(CORRECTION_FLAG_BITS.values())


def choose_variant(variant: str | None, provider: str) -> str:
    """The variant to run for ``provider``: ``resolve_variant``, except that the default
    falls back to ``two_kernel`` for a provider other than quanto (the other variants need
    quanto's C entry); a variant asked for by name there is an error naming it."""
    name = resolve_variant(variant, DEFAULT_VARIANT)
    if provider != "quanto" and name != "two_kernel":
        if not variant_requested(variant):
            return "two_kernel"
        raise CorrectionVariantError(
            f"variant: {name!r} needs the quanto provider "
            f"(provider {provider} runs two_kernel only)")
    return name


def call_group_size(groupsize: int, K: int) -> int:
    """The rows of one group of a Marlin call: K for groupsize -1 (per-column)."""
    return K if groupsize == -1 else groupsize


def marlin_mm_asymmetric(A: torch.Tensor, pack: MarlinPack, C: torch.Tensor,
                         workspace: torch.Tensor, provider: str | None = None,
                         groupsize: int | None = None, max_par: int = DEFAULT_MAX_PAR,
                         variant: str | None = None, flags: int = 0) -> int:
    """Marlin, then the correction (skipped when rc != 0). Returns Marlin's rc.

    ``groupsize`` defaults to ``pack.marlin_groupsize`` (-1 for per-row weights); passing
    the weight's own group size for a per-row weight reproduces TinyLoop's first defect.
    ``variant`` (None: ``$HARNESS_CORRECTION_VARIANT``, else ``DEFAULT_VARIANT``) picks the
    correction's implementation; ``two_kernel`` zeroes C first, as the seed does.
    ``flags`` goes to the CUDA correction unchanged (``CORRECTION_FLAG_BITS``; 0: correct).
    """
    prov = get_provider(provider)
    gs = pack.marlin_groupsize if groupsize is None else groupsize
    name = concrete_variant(choose_variant(variant, prov.name), int(A.shape[0]),
                            call_group_size(gs, int(A.shape[1])))
    ext = extension()
    if prov.name == "quanto":
        vid, sz = ext_id(name), scaled_zero(pack)
        if vid is None:
            return int(ext.marlin_mm_asymmetric(A, pack.B, C, pack.scales, sz, pack.delta,
                                                workspace, gs, -1, -1, -1, max_par, flags))
        return int(ext.marlin_asym_variant(A, C, pack.B, pack.scales, sz, pack.delta,
                                           workspace, gs, vid, flags, max_par))
    C.zero_()
    rc = prov.gemm(A, pack, C, workspace, gs, max_par)
    if rc == 0:
        ext.apply_correction(A, C, pack.delta, flags)
    return rc


def emulate_asymmetric(A: torch.Tensor, W_implied: torch.Tensor, pack: MarlinPack) -> torch.Tensor:
    """CPU emulation in float64: A @ W_implied + the Python correction."""
    return apply_marlin_correction(A.double() @ W_implied, A, pack.delta, pack.group_size)


class MarlinAsymPath(GemmPath):
    """Marlin's symmetric kernel + the asymmetric zero-point correction (TinyLoop's path 3).

    ``variant`` (see ``harness.kernels.marlin.variants``) is resolved at ``prepare``
    (None: ``$HARNESS_CORRECTION_VARIANT``, else ``DEFAULT_VARIANT``) and kept in the
    prepared state; ``run_variant`` runs any other one on the same prepared weight.
    ``correction_flags`` is the CUDA correction's ``flags`` argument on every call (see
    the module docstring; 0 in the product).
    """

    name = "marlin_asym"
    role = "path"
    description = "Marlin symmetric INT4 kernel + a_group_sum/correction_accum correction"
    nondeterminism = MARLIN_NONDETERMINISM
    is_marlin = True
    min_capability = MIN_CAPABILITY
    variants = tuple(VARIANTS)
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp32 delta G*N*4"

    def __init__(self, variant: str | None = None, correction_flags: int = 0) -> None:
        self.variant = None if variant is None else check_variant_name(variant)
        if isinstance(correction_flags, bool) or not isinstance(correction_flags, int) \
                or not 0 <= correction_flags <= _ALL_FLAGS:
            raise ValueError(f"correction_flags: {correction_flags!r} is not an int of the bits "
                             f"{CORRECTION_FLAG_BITS}")
        self.correction_flags = correction_flags
        self._ext_call = None

    # ------------------------------------------------------------------ what it knows
    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type == "cpu":
            return None
        return self.arch_reason(device) or get_provider().unavailable_reason(device)

    def unsupported_reason(self, case) -> str | None:
        return marlin_unsupported_reason(case.M, case.N, case.K, case.group_size)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return int4_weight_bytes(K, N, groups, 2 + 4)

    def error_bound(self, case) -> tuple[float, str]:
        try:
            per_column = get_provider().formula(-1)
        except ValueError:              # an unknown $HARNESS_MARLIN_PROVIDER: prepare says so
            per_column = None
        if case.per_row and per_column == "q_times_s":
            return QUANTO_PER_COLUMN_BOUND, QUANTO_PER_COLUMN_REASON
        return MARLIN_SPLIT_K_BOUND, MARLIN_SPLIT_K_REASON

    def implementation(self, device: torch.device) -> str:
        variant = choose_variant(self.variant, get_provider().name)
        if device.type == "cpu":
            return ("CPU emulation: float64 A @ W_implied (unpacked Marlin pack) "
                    "+ Python correction; "
                    f"not Marlin (correction variant {describe(variant)} not emulated)")
        prov = get_provider()
        cap = ""
        if device.type == "cuda" and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(device)
            cap = f" on SM {major}.{minor}"
            if (major, minor) not in ((8, 0), (8, 6), (8, 9)):
                cap += " (outside TinyLoop's Marlin list 8.0/8.6/8.9: measured by the harness only)"
        flags = f"; correction flags {self.correction_flags}" if self.correction_flags else ""
        return (f"Marlin via provider {prov.name} ({prov.description}) + harness correction kernels"
                f" (variant {describe(variant)}); grouped formula {prov.formula(128)}, per-column "
                f"{prov.formula(-1)}{cap}{flags}")

    # ------------------------------------------------------------------ load time
    def kernel_groupsize(self, weight: QuantizedWeight) -> int:
        """The groupsize handed to Marlin for ``weight``: -1 for a per-row weight."""
        return marlin_groupsize(weight.group_size, weight.K)

    def pack_weight(self, weight: QuantizedWeight, formula: str) -> MarlinPack:
        """The load-time pack of ``weight`` for a provider whose dequantization is ``formula``."""
        return marlin_pack_asymmetric(weight, formula=formula)

    def unsupported_weight_reason(self, weight: QuantizedWeight) -> str | None:
        # on the CPU's emulation as on the GPU: the emulation models Marlin's limits too
        return marlin_weight_reason(weight.N, weight.K, weight.group_size)

    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        weight = weight.to(device)
        prov = get_provider()
        variant = choose_variant(self.variant, prov.name)
        gs = self.kernel_groupsize(weight)
        pack = self.pack_weight(weight, prov.formula(gs))
        # the rows of one group (K per-column): auto's pick depends on it (``concrete_variant``)
        state: dict = {"pack": pack, "groupsize": gs, "provider": prov.name, "variant": variant,
                       "group_rows": call_group_size(gs, weight.K)}
        if device.type == "cpu":
            state["W_implied"] = implied_weight(pack)
            extra = pack.nbytes()
            notes = "CPU emulation of Marlin + correction"
        else:
            ws = new_workspace(weight.N, device)
            state["workspace"] = ws
            # marlin_asym_variant's tensor arguments after (A, C); cloned with the pack by
            # the timing rotation (tuples are walked), so every copy keeps its own tensors
            state["vargs"] = (pack.B, pack.scales, scaled_zero(pack), pack.delta, ws)
            extra = pack.nbytes() + ws.numel() * 4
            notes = (f"provider {prov.name}; formula {pack.formula}; marlin groupsize {gs}; "
                     f"correction variant {describe(variant)}")
        return Prepared(self.name, weight, device, state=state, extra_bytes=extra, notes=notes)

    # ------------------------------------------------------------------ the call
    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return self.run_variant(prepared, A, out, None)

    def run_variant(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor,
                    variant: str | None) -> torch.Tensor:
        """Marlin + correction ``variant`` (None: the prepared one) into ``out``."""
        st = prepared.state
        if prepared.device.type == "cpu":
            out.copy_(emulate_asymmetric(A, st["W_implied"], st["pack"]))
            return out
        name = st["variant"] if variant is None else variant
        if name == "auto":
            name = concrete_variant(name, int(A.shape[0]), st["group_rows"])
        vid = EXT_IDS[name] if name in EXT_IDS else ext_id(name)   # ext_id raises on a bad name
        if vid is not None and st["provider"] == "quanto":
            call = self._ext_call or self._bind()      # the lean route: one C++ call
            rc = call(A, out, *st["vargs"], st["groupsize"], vid, self.correction_flags,
                      DEFAULT_MAX_PAR)
        else:
            rc = marlin_mm_asymmetric(A, st["pack"], out, st["workspace"], st["provider"],
                                      st["groupsize"], variant=name, flags=self.correction_flags)
        if rc != 0:
            raise KernelReturnCode(self.name, rc, rc_meaning(rc))
        return out

    def run_marlin_only(self, prepared: Prepared, A: torch.Tensor,
                        out: torch.Tensor) -> torch.Tensor:
        """Marlin's symmetric GEMM alone (no zeroing, no correction): for timing the overhead."""
        st = prepared.state
        if prepared.device.type == "cpu":
            out.copy_(A.double() @ st["W_implied"])
            return out
        if st["provider"] == "quanto":       # the same lean entry as the variants
            call = self._ext_call or self._bind()
            rc = call(A, out, *st["vargs"], st["groupsize"], EXT_IDS["marlin_only"], 0,
                      DEFAULT_MAX_PAR)
        else:
            rc = get_provider(st["provider"]).gemm(A, st["pack"], out, st["workspace"],
                                                   st["groupsize"])
        if rc != 0:
            raise KernelReturnCode(self.name, rc, rc_meaning(rc))
        return out

    def _bind(self):
        self._ext_call = extension().marlin_asym_variant
        return self._ext_call
