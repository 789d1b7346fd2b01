"""Path ``marlin_asym``: unmodified symmetric Marlin + TinyLoop's asymmetric correction.

C = Marlin(A, W_implied) + a_group_sum(A) @ delta, delta = W_asym - W_implied per
(group, column), W_implied being the provider's own dequantization
(``harness.kernels.marlin_providers``). ``marlin_mm_asymmetric`` zeroes C, runs Marlin,
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

Correction variants (``harness.kernels.correction_variants``): ``two_kernel`` is the
seed's design above; the others (lean two-kernel call, CUDA graph, side stream, fused
tiled kernel, fused with programmatic dependent launch) go through one C++ entry,
``marlin_asym_variant``, that launches Marlin and the correction with no per-call
allocation. Which one runs: ``MarlinAsymPath(variant=...)``, else
``$HARNESS_CORRECTION_VARIANT``, else ``DEFAULT_VARIANT`` (``auto`` picks per shape class
from ``correction_variants.AUTO_BY_CLASS``). Only the quanto provider runs the new ones.

Test-only hooks (never set them outside tests; ``planted_defect`` restores them):
  * ``TEST_DEFECT``: None, "delta_wrong_sign" (the correction uses -delta) or
    "correction_twice" (the correction is applied two times).
  * ``CORRECTION_FLAGS``: passed as ``flags`` to the CUDA correction (bit 0 fp16
    accumulation, bit 1 skip the last 128-column tile, bit 2 do not regrow the scratch).
    Every variant honours bits 0 and 1; bit 2 concerns the seed's scratch only (the
    other variants own a grow-only scratch).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from harness.cases.data import QuantizedWeight

from .base import PATHS, GemmPath, KernelReturnCode, Prepared
from .build import extension
from .correction_variants import (
    EXT_IDS,
    CorrectionVariantError,
    check_variant_name,
    concrete_variant,
    describe,
    ext_id,
    resolve_variant,
    variant_requested,
)
from .marlin_pack import MarlinPack, marlin_groupsize, marlin_pack_asymmetric
from .marlin_providers import (
    DEFAULT_MAX_PAR,
    MARLIN_NONDETERMINISM,
    get_provider,
    marlin_unsupported_reason,
    rc_meaning,
    workspace_entries,
)
from .reference import apply_marlin_correction, implied_weight

#: The variant ``marlin_asym`` runs unless told otherwise: ``auto``, i.e. per shape class
#: the variant ``correction_variants.AUTO_BY_CLASS`` names (the correction study's pick on
#: the H200: side_stream in every class; docs/hopper.md section 5).
DEFAULT_VARIANT = "auto"

DEFECTS = (None, "delta_wrong_sign", "correction_twice")
TEST_DEFECT: str | None = None
CORRECTION_FLAGS: int = 0
#: Test-only: when set, the variant every call without an explicit one runs (a planted
#: defect that lives in one variant's kernels pins that variant).
TEST_VARIANT: str | None = None


@contextmanager
def planted_defect(defect: str | None = None, flags: int = 0,
                   variant: str | None = None) -> Iterator[None]:
    """Test-only: plant ``defect`` (see ``DEFECTS``) and/or CUDA correction ``flags``.

    ``variant`` pins the correction variant of every call that does not name one (e.g.
    ``two_kernel`` for flag bit 2, which only the seed's scratch honours)."""
    global TEST_DEFECT, CORRECTION_FLAGS, TEST_VARIANT
    if defect not in DEFECTS:
        raise ValueError(f"defect: {defect!r} is not one of {DEFECTS}")
    pinned = None if variant is None else check_variant_name(variant)
    saved = TEST_DEFECT, CORRECTION_FLAGS, TEST_VARIANT
    TEST_DEFECT, CORRECTION_FLAGS, TEST_VARIANT = defect, int(flags), pinned
    try:
        yield
    finally:
        TEST_DEFECT, CORRECTION_FLAGS, TEST_VARIANT = saved


def choose_variant(variant: str | None, provider: str) -> str:
    """The variant to run for ``provider``: ``resolve_variant``, except that the default
    falls back to ``two_kernel`` for a provider other than quanto (the other variants need
    quanto's C entry); a variant asked for by name there is an error naming it."""
    name = resolve_variant(variant, DEFAULT_VARIANT)
    if provider != "quanto" and name != "two_kernel":
        if not variant_requested(variant):
            return "two_kernel"
        raise CorrectionVariantError(
            f"variant: {name!r} needs the quanto provider (provider {provider} runs two_kernel only)")
    return name


def new_workspace(N: int, device: torch.device, max_par: int = DEFAULT_MAX_PAR) -> torch.Tensor:
    """Marlin's lock workspace: int32 zeros of N / 128 * max_par (Marlin leaves it zeroed)."""
    return torch.zeros(max(1, workspace_entries(N, max_par)), dtype=torch.int32, device=device)


def marlin_mm_asymmetric(A: torch.Tensor, pack: MarlinPack, C: torch.Tensor,
                         workspace: torch.Tensor, provider: str | None = None,
                         groupsize: int | None = None, max_par: int = DEFAULT_MAX_PAR,
                         variant: str | None = None) -> int:
    """Marlin, then the correction (skipped when rc != 0). Returns Marlin's rc.

    ``groupsize`` defaults to ``pack.marlin_groupsize`` (-1 for per-row weights); passing
    the weight's own group size for a per-row weight reproduces TinyLoop's first defect.
    ``variant`` (None: ``$HARNESS_CORRECTION_VARIANT``, else ``DEFAULT_VARIANT``) picks the
    correction's implementation; ``two_kernel`` zeroes C first, as the seed does.
    """
    prov = get_provider(provider)
    gs = pack.marlin_groupsize if groupsize is None else groupsize
    delta = -pack.delta if TEST_DEFECT == "delta_wrong_sign" else pack.delta
    flags = CORRECTION_FLAGS
    if variant is None:
        variant = TEST_VARIANT
    name = concrete_variant(choose_variant(variant, prov.name), int(A.shape[0]))
    ext = extension()
    if prov.name == "quanto":
        sz = pack.sz if pack.sz is not None else (pack.scales.float() * -8.0).to(torch.float16)
        vid = ext_id(name)
        if vid is None:
            rc = int(ext.marlin_mm_asymmetric(A, pack.B, C, pack.scales, sz, delta, workspace, gs,
                                              -1, -1, -1, max_par, flags))
        else:
            rc = int(ext.marlin_asym_variant(A, C, pack.B, pack.scales, sz, delta, workspace, gs,
                                             vid, flags, max_par))
    else:
        C.zero_()
        rc = prov.gemm(A, pack, C, workspace, gs, max_par)
        if rc == 0:
            ext.apply_correction(A, C, delta, flags)
    if rc == 0 and TEST_DEFECT == "correction_twice":
        ext.apply_correction(A, C, delta, flags)
    return rc


def emulate_asymmetric(A: torch.Tensor, W_implied: torch.Tensor, pack: MarlinPack) -> torch.Tensor:
    """CPU emulation in float64: A @ W_implied + the Python correction (hooks honoured)."""
    delta = -pack.delta if TEST_DEFECT == "delta_wrong_sign" else pack.delta
    C = apply_marlin_correction(A.double() @ W_implied, A, delta, pack.group_size)
    if TEST_DEFECT == "correction_twice":
        C = apply_marlin_correction(C, A, delta, pack.group_size)
    return C


class MarlinAsymPath(GemmPath):
    """Marlin's symmetric kernel + the asymmetric zero-point correction (TinyLoop's path 3).

    ``variant`` (see ``harness.kernels.correction_variants``) is resolved at ``prepare``
    (None: ``$HARNESS_CORRECTION_VARIANT``, else ``DEFAULT_VARIANT``) and kept in the
    prepared state; ``run_variant`` runs any other one on the same prepared weight.
    """

    name = "marlin_asym"
    role = "path"
    description = "Marlin symmetric INT4 kernel + a_group_sum/correction_accum correction"
    nondeterminism = MARLIN_NONDETERMINISM

    def __init__(self, variant: str | None = None) -> None:
        self.variant = None if variant is None else check_variant_name(variant)
        self._ext_call = None

    def unavailable_reason(self, device: torch.device) -> str | None:
        if device.type == "cpu":
            return None
        return get_provider().unavailable_reason(device)

    def unsupported_reason(self, case) -> str | None:
        return marlin_unsupported_reason(case.M, case.N, case.K, case.group_size)

    def implementation(self, device: torch.device) -> str:
        variant = choose_variant(self.variant, get_provider().name)
        if device.type == "cpu":
            return ("CPU emulation: float64 A @ W_implied (unpacked Marlin pack) + Python correction; "
                    f"not Marlin (correction variant {describe(variant)} not emulated)")
        prov = get_provider()
        cap = ""
        if device.type == "cuda" and torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(device)
            cap = f" on SM {major}.{minor}"
            if (major, minor) not in ((8, 0), (8, 6), (8, 9)):
                cap += " (outside TinyLoop's Marlin list 8.0/8.6/8.9: measured by the harness only)"
        return (f"Marlin via provider {prov.name} ({prov.description}) + harness correction kernels"
                f" (variant {describe(variant)}); grouped formula {prov.formula(128)}, per-column "
                f"{prov.formula(-1)}{cap}")

    def prepare(self, weight: QuantizedWeight, device: torch.device) -> Prepared:
        weight = weight.to(device)
        prov = get_provider()
        variant = choose_variant(self.variant, prov.name)
        gs = marlin_groupsize(weight.group_size, weight.K)
        pack = marlin_pack_asymmetric(weight, formula=prov.formula(gs))
        state: dict = {"pack": pack, "groupsize": gs, "provider": prov.name, "variant": variant}
        if device.type == "cpu":
            state["W_implied"] = implied_weight(pack)
            extra = pack.nbytes()
            notes = "CPU emulation of Marlin + correction"
        else:
            ws = new_workspace(weight.N, device)
            sz = pack.sz if pack.sz is not None else (pack.scales.float() * -8.0).to(torch.float16)
            state["workspace"] = ws
            # marlin_asym_variant's tensor arguments after (A, C); cloned with the pack by
            # the timing rotation (tuples are walked), so every copy keeps its own tensors
            state["vargs"] = (pack.B, pack.scales, sz, pack.delta, ws)
            extra = pack.nbytes() + ws.numel() * 4
            notes = (f"provider {prov.name}; formula {pack.formula}; marlin groupsize {gs}; "
                     f"correction variant {describe(variant)}")
        return Prepared(self.name, weight, device, state=state, extra_bytes=extra, notes=notes)

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
        if variant is None and TEST_VARIANT is not None:
            name = TEST_VARIANT
        if name == "auto":
            name = concrete_variant(name, int(A.shape[0]))
        vid = EXT_IDS[name] if name in EXT_IDS else ext_id(name)   # ext_id raises on a bad name
        if vid is not None and TEST_DEFECT is None and st["provider"] == "quanto":
            call = self._ext_call or self._bind()      # the lean route: one C++ call
            rc = call(A, out, *st["vargs"], st["groupsize"], vid, CORRECTION_FLAGS, DEFAULT_MAX_PAR)
        else:
            rc = marlin_mm_asymmetric(A, st["pack"], out, st["workspace"], st["provider"],
                                      st["groupsize"], variant=name)
        if rc != 0:
            raise KernelReturnCode(self.name, rc, rc_meaning(rc))
        return out

    def run_marlin_only(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Marlin's symmetric GEMM alone (no zeroing, no correction): for timing the overhead."""
        st = prepared.state
        if prepared.device.type == "cpu":
            out.copy_(A.double() @ st["W_implied"])
            return out
        if st["provider"] == "quanto":       # the same lean entry as the variants
            call = self._ext_call or self._bind()
            rc = call(A, out, *st["vargs"], st["groupsize"], EXT_IDS["marlin_only"], 0, DEFAULT_MAX_PAR)
        else:
            rc = get_provider(st["provider"]).gemm(A, st["pack"], out, st["workspace"], st["groupsize"])
        if rc != 0:
            raise KernelReturnCode(self.name, rc, rc_meaning(rc))
        return out

    def _bind(self):
        self._ext_call = extension().marlin_asym_variant
        return self._ext_call


PATH = PATHS.register(MarlinAsymPath())
