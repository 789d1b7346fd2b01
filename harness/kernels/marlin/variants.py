"""Variants of the ``marlin_asym`` correction: names, what each one is, how one is chosen.

The correction is the same math in every variant, C = Marlin(A, W_implied) +
a_group_sum(A) @ delta (see ``harness.kernels.marlin.asym``); what differs is how many
launches it costs, what overlaps what, and the host work per call. Marlin itself is never
modified. The CUDA side is ``csrc/correction_variants.cu`` (the driver: ids = positions in
``EXT_VARIANTS``, checked against the extension's ``correction_variant_names()``) and one
file per variant family: ``correction_variant_graph.cu`` (two_kernel_lean, graph),
``correction_variant_side_stream.cu`` (side_stream's a_sum), ``correction_variant_fused.cu``
(the tiled kernel of side_stream / fused / fused_pdl, and the empty floors),
``correction_variant_stream.cu`` (stream's two kernels), ``correction_variant_wide.cu``
(wide's accumulation), ``correction_variant_gsplit.cu`` (gsplit's accumulation),
``correction_variant_blocked.cu`` (blocked's accumulation), ``correction_variant_fold.cu``
(fold's one-kernel correction), ``correction_variant_floor.cu`` (the rmw floor's kernel).

Extension point: a new variant is one id in ``CorrectionVariant`` (harness_kernels.h),
its name in ``correction_variant_name`` and a branch in ``run_marlin_asym_variant``
(correction_variants.cu), one ``Variant`` entry in ``VARIANTS`` here, and a row in the
study (``harness.studies.correction_study`` measures every entry of ``STUDIED``). A variant
built from torch calls instead (``ext_id`` None; the ``addmm`` probe was one, in git at
890e885) is its ``Variant`` entry, its module beside this one and a branch in
``MarlinAsymPath.run_variant`` and ``marlin_mm_asymmetric`` (``harness.kernels.marlin.asym``).

Selection: ``MarlinAsymPath(variant=...)``, else ``$HARNESS_CORRECTION_VARIANT``, else
``DEFAULT_VARIANT``. ``auto`` picks per call from ``AUTO_BY_CLASS`` by the shape class of
M (``shape_class``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

VARIANT_ENV = "HARNESS_CORRECTION_VARIANT"
#: The variant ``marlin_asym`` runs unless told otherwise: ``auto``, i.e. per shape class
#: the variant ``AUTO_BY_CLASS`` names (the correction study's picks: wide above decode
#: since 2026-12-04 on the H200, docs/hopper.md section 5.5; gsplit at decode since
#: 2026-12-06 on two H100s, section 5.8).
DEFAULT_VARIANT = "auto"

#: Variant ids of the extension's ``marlin_asym_variant`` (index = id). Keep in step with
#: ``CorrectionVariant`` in csrc/harness_kernels.h.
EXT_VARIANTS = ("marlin_only", "two_kernel_lean", "graph", "side_stream", "fused", "fused_pdl",
                "empty", "empty_pdl", "stream", "wide", "rmw", "gsplit", "blocked",
                "fold")


class CorrectionVariantError(ValueError):
    """An unknown or unusable correction variant; the message names the field."""


@dataclass(frozen=True)
class Variant:
    """One selectable way to run Marlin + the correction."""

    name: str
    ext_id: int | None   # id for the extension's marlin_asym_variant; None: another route
    kind: str            # "correction", "baseline" (Marlin alone), "floor" (no correction), "auto"
    description: str


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("two_kernel", None, "correction",
            "the seed's design as first built: Python wrapper, C.zero_(), Marlin, a_group_sum "
            "(one block per (m, g)), correction_accum (one thread per cell), cached scratch"),
    Variant("two_kernel_lean", 1, "correction",
            "the seed's four operations (memset, Marlin, a_group_sum, correction_accum) issued "
            "from one C++ call with a cached scratch: the seed's kernels minus host overhead"),
    Variant("graph", 2, "correction",
            "the seed's four operations captured once per (pointers, shape) into a CUDA graph, "
            "one replay per call (inside an outer capture: launched directly)"),
    Variant("side_stream", 3, "correction",
            "a_sum (16-byte loads, deterministic segment reduction) on a side stream while "
            "Marlin runs, joined by an event; one tiled accumulation kernel; no zeroing"),
    Variant("fused", 4, "correction",
            "Marlin, then ONE tiled kernel that computes a_sum for its rows in shared memory, "
            "accumulates 8 columns x RM rows per thread and adds to C with 16-byte accesses"),
    Variant("fused_pdl", 5, "correction",
            "the fused kernel launched with programmatic dependent launch (SM 9.0+): all work "
            "but the C update runs before griddepcontrol.wait; plain launch before SM 9.0"),
    Variant("stream", 8, "correction",
            "side_stream's sequence with a_sum cut by group (a warp or a block per group of "
            "A's flat vectors) and an accumulation with no shared memory or barrier: each "
            "thread loads its RM C vectors first, sums all groups in registers, writes once "
            "(M <= 16: G split over the idle row slots, added in order after one barrier; "
            "side_stream's corr_tile accumulates grouped weights at 2 <= M <= 256 and "
            ">= 32 groups per row at any M > 1)"),
    Variant("wide", 9, "correction",
            "stream's sequence with another accumulation where it was measured faster "
            "(2 <= G < 32 at M >= 2, any G at M > 256): a block per 256 columns of 8-32 rows "
            "loads its C values, stages up to 32 groups of delta and a_sum in shared memory, "
            "then each lane adds the groups in order for two quads of "
            "columns of 1-4 rows; at M <= 4 one kernel after Marlin on its stream (group "
            "sums and accumulation, no side stream); elsewhere stream's kernels"),
    Variant("gsplit", 11, "correction",
            "stream's sequence with another accumulation at 2 <= M <= 256 for grouped weights "
            "(G >= 2): a block per 64 columns of 1-32 rows whose threads split the groups, each "
            "thread with all loads of its (at most 4) groups in flight at once, the slices "
            "added in order in shared memory after one barrier, C in 16-byte vectors (issue "
            "41: the accumulation kernels before it walked the groups in a chain of loads); "
            "wide's accumulation elsewhere (stream's decode kernel at M = 1)"),
    Variant("blocked", 12, "correction",
            "stream's sequence with a register-blocked accumulation at M >= 17 for grouped "
            "weights (G >= 2): a block per 16 x TM rows and 128 columns stages 32 groups of "
            "delta and a_sum at a time in shared memory, each thread adds them in order for "
            "TM rows x 8 columns (delta crosses L2 once per 16 TM rows; issue 41's mid and "
            "large grouped shapes); gsplit's accumulation elsewhere"),
    Variant("fold", 13, "correction",
            "for per-column weights (G = 1) at M >= 17 the group sum folded into the "
            "accumulation: one kernel after Marlin on its stream (no side stream, no scratch) "
            "whose blocks each sum 1-4 whole rows of A and add a_sum x delta to every column "
            "of those rows (issue 41: above M = 48 Marlin leaves no room for a side-stream "
            "sum); blocked's sequence elsewhere"),
    Variant("marlin_only", 0, "baseline",
            "Marlin alone (no zeroing, no correction): the overhead baseline"),
    Variant("empty", 6, "floor",
            "Marlin + one empty kernel: the floor of any one-kernel correction"),
    Variant("empty_pdl", 7, "floor",
            "Marlin + one empty kernel launched with PDL: the floor of fused_pdl"),
    Variant("rmw", 10, "floor",
            "Marlin + one kernel that reads every element of C and writes it back unchanged "
            "(16-byte accesses): the floor of a correction that reads C after Marlin and "
            "writes it back (every correction here does)"),
    Variant("auto", None, "auto", "per call, the variant AUTO_BY_CLASS names for M's shape class"),
)}

#: name -> extension id (None: two_kernel's own route) for every concrete variant.
EXT_IDS: dict[str, int | None] = {n: v.ext_id for n, v in VARIANTS.items() if v.kind != "auto"}

#: Real corrections, in the order the study measures them.
CORRECTIONS = tuple(n for n, v in VARIANTS.items() if v.kind == "correction")
FLOORS = tuple(n for n, v in VARIANTS.items() if v.kind == "floor")
#: The variants with no correction of their own: their output is Marlin's, checked for
#: being written and repeatable, not for a correction's accuracy.
UNCORRECTED = ("marlin_only",) + FLOORS
#: Everything the study times per shape (the baseline first).
STUDIED = ("marlin_only",) + CORRECTIONS + FLOORS

#: Shape classes of M (inclusive bounds): decode, mid-size batches, prefill.
SHAPE_CLASSES = (("decode", 1, 16), ("mid", 17, 256), ("large", 257, math.inf))

#: The variant ``auto`` runs per shape class: the line ``correction_study`` printed under
#: "Recommendation" on the H200 (docs/hopper.md sections 4-5). Re-run the study on another
#: GPU before trusting it there; paste the line it prints. stream (with corr_tile where
#: ``stream_takes_tile`` routes it) was 0.77-0.98x side_stream's time at all 56 production
#: shapes in graph mode and within +0.3% cold, with the same rel_err (docs/hopper.md 5.4);
#: wide (corr_wide where ``wide_takes`` routes it, one kernel after Marlin at M <= 4) took
#: 0.85-1.00x stream's time at M >= 32 in graph mode (the gating mode) but 1.00-1.04x at
#: M = 1, so decode keeps stream; eager at M = 1 wide needs a third less host work per call
#: (``HARNESS_CORRECTION_VARIANT=wide`` for a host-bound eager decode; docs/hopper.md 5.5).
#: Decode runs gsplit since 2026-12-06 (docs/hopper.md 5.8): on a fresh H100 the shipped
#: build cut the M = 16 grouped shapes' excess over the rmw floor by 6.0-18.3 pp (graph;
#: its first build, on another H100, by 4.2-19.5), and it runs stream's own kernels at M = 1
#: and for per-column weights; it lost at M >= 128 and where C is large, so mid and large
#: keep wide. Not yet measured on an H200.
AUTO_BY_CLASS: dict[str, str] = {
    "decode": "gsplit", "mid": "wide", "large": "wide",
}


def shape_class(M: int) -> str:
    """'decode' (M <= 16), 'mid' (17..256) or 'large' (M >= 257)."""
    if isinstance(M, bool) or not isinstance(M, int) or M < 1:
        raise CorrectionVariantError(f"M: must be a positive int, got {M!r}")
    for name, lo, hi in SHAPE_CLASSES:
        if lo <= M <= hi:
            return name
    raise AssertionError("unreachable: the classes cover every M >= 1")


def check_variant_name(name: str, field: str = "variant") -> str:
    """``name`` if it is a known variant, else ``CorrectionVariantError`` naming ``field``."""
    if not isinstance(name, str) or name not in VARIANTS:
        raise CorrectionVariantError(f"{field}: {name!r} is not one of {', '.join(VARIANTS)}")
    return name


def resolve_variant(name: str | None, default: str) -> str:
    """The variant to use: ``name``, else ``$HARNESS_CORRECTION_VARIANT``, else ``default``."""
    if name is not None:
        return check_variant_name(name)
    env = os.environ.get(VARIANT_ENV, "").strip()
    if env:
        return check_variant_name(env, f"${VARIANT_ENV}")
    return check_variant_name(default, "DEFAULT_VARIANT")


def variant_requested(name: str | None) -> bool:
    """True when ``name`` or ``$HARNESS_CORRECTION_VARIANT`` asks for a variant (not the
    default)."""
    return name is not None or bool(os.environ.get(VARIANT_ENV, "").strip())


#: The variants whose group sums (``asum_flat`` in csrc/correction_variant_stream.cu) cut a
#: group into warps: they refuse a group size ``flat_cuts`` rejects.
FLAT_SUM = ("stream", "wide", "gsplit", "blocked", "fold")
#: What ``auto`` runs instead where its pick is one of ``FLAT_SUM`` and the group cannot be
#: cut (a per-column weight of K = 384, 640, 896, ...: Marlin takes any K % 128 == 0):
#: side_stream's sequence, whose group sums take any group size.
AUTO_UNCUT = "side_stream"


def flat_cuts(group_size: int) -> bool:
    """Whether stream's and wide's group sums take a group of ``group_size`` rows: 8 x v
    with v a divisor of 32 (8, 16, ..., 256) or a multiple of 32 (256, 512, ...). The
    rule of ``stream_unsupported`` (csrc/correction_variant_stream.cu), which refuses the
    others in one line; ``auto`` avoids them (``AUTO_UNCUT``)."""
    v = group_size // 8
    return group_size > 0 and group_size % 8 == 0 and (32 % v == 0 or v % 32 == 0)


def concrete_variant(name: str, M: int, group_size: int | None = None) -> str:
    """``name`` itself, or for ``auto`` the entry of ``AUTO_BY_CLASS`` for M's class
    (``two_kernel`` for a class the table leaves out); where that entry cannot cut the
    call's group (``group_size``: K for a per-column weight; None: not checked),
    ``AUTO_UNCUT``. A variant asked for by name is never replaced: it refuses instead."""
    if name != "auto":
        return name
    pick = check_variant_name(AUTO_BY_CLASS.get(shape_class(M), "two_kernel"), "AUTO_BY_CLASS")
    if pick in FLAT_SUM and group_size is not None and not flat_cuts(group_size):
        return AUTO_UNCUT
    return pick


def describe(name: str) -> str:
    """``name``, and for ``auto`` what it runs per class (for row notes and the environment)."""
    if name != "auto":
        return name
    picks = ", ".join(f"{c}={AUTO_BY_CLASS.get(c, 'two_kernel')}" for c, _, _ in SHAPE_CLASSES)
    return f"auto ({picks}; {AUTO_UNCUT} where {'/'.join(FLAT_SUM)} cannot cut the group)"


def ext_id(name: str) -> int | None:
    """The extension id of a concrete variant (None for ``two_kernel``)."""
    v = VARIANTS[check_variant_name(name)]
    if v.kind == "auto":
        raise CorrectionVariantError(
            "variant: 'auto' has no id; resolve it with concrete_variant(name, M)")
    return v.ext_id


def check_extension_names(names) -> None:
    """Raise when the extension's variant table differs from ``EXT_VARIANTS``."""
    got = tuple(str(n) for n in names)
    if got != EXT_VARIANTS:
        raise CorrectionVariantError(
            f"EXT_VARIANTS: the extension defines {got}, the Python table {EXT_VARIANTS}")
