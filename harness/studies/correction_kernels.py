"""Each correction kernel's device time beside its own floor: ``harness study kernels``.

The correction of ``marlin_asym`` (C += a_group_sum(A) @ delta) is run alone, without
Marlin, through the extension's ``correction_variant`` entry, one variant at a time, under
torch.profiler (CUPTI: each kernel's own device time, launch gaps excluded). Per shape,
variant and kernel it reports the median device time over ``--reps`` calls and the
kernel's floor, the larger of:

* the empty kernel's device time, measured the same way (``launch_empty``, profiled), and
* the bytes the kernel must move (``kernel_bytes``: what it reads and writes at least once)
  over the copy bandwidth measured in the same run (``measure_ceilings``).

A kernel is "within" when its time is at most ``--target`` (1.5) times its floor. Beside
it, ``copy_us``: torch's own device copy of the same number of bytes (half read, half
written), profiled the same way. At small sizes an empty kernel is no floor for a kernel
that must read memory once (0.54 us on the H200, under one memory round trip): the copy
of the same bytes is what the GPU's simplest kernel takes to touch them, latency
included, and ``copy_ratio`` = time / max(floor, copy) says how far a kernel is from it. The
variants and their kernels (``VARIANT_KERNELS``): ``two_kernel_lean`` (the seed's
a_group_sum_kernel and correction_accum_kernel), ``side_stream`` (asum_kernel, then
corr_tile_kernel reading a_sum; alone here, so asum does not share the GPU with Marlin),
``fused`` (corr_tile_kernel summing A in-block), ``stream`` (asum_flat_*_kernel, then
corr_stream_kernel or corr_tile_kernel) and ``wide`` (asum_flat_*_kernel, then
corr_wide_kernel or stream's accumulation; at M <= 4 corr_decode_kernel alone).
``--cold-l2`` overwrites a buffer of twice the L2 between calls (its kernels are not
counted), so A, C and delta come from DRAM; by default they may sit in L2, as they partly
do after Marlin in the real path (Marlin has just read A and written C).

Inputs: A and delta as the path has them (fp16 activations of the case, fp32 delta of
shape [K / group_size, N]; delta is drawn at random here, the kernels never branch on
values), C fp16 [M, N]. Writes ``--out`` (CSV, one row per shape x variant x kernel).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import asdict, dataclass, replace

import pandas as pd
import torch

from harness.cases import MATRICES
from harness.cases.data import case_data
from harness.kernels.build import extension
from harness.kernels.marlin.variants import EXT_IDS
from harness.measure.ceilings import l2_cache_bytes, measure_ceilings

from .crosscheck import profiled_spans

#: profiler kernel-name fragment -> the study's kernel name (longest fragments first)
KERNEL_NAMES = (("corr_stream_split_kernel", "corr_stream"), ("corr_stream_kernel", "corr_stream"),
                ("corr_wide_kernel", "corr_wide"), ("corr_decode_kernel", "corr_decode"),
                ("corr_gsplit_kernel", "corr_gsplit"), ("corr_blocked_kernel", "corr_blocked"),
                ("corr_fold_kernel", "corr_fold"),
                ("asum_flat", "asum_flat"),
                ("correction_accum_kernel", "correction_accum"),
                ("a_group_sum_kernel", "a_group_sum"),
                ("corr_tile_kernel", "corr_tile"), ("asum_kernel", "asum"),
                ("empty_kernel", "empty"))
#: variant -> its kernels, in launch order; fused's corr_tile sums A itself ("+sum"); "a|b":
#: the variant launches one of them by shape (stream: corr_tile for grouped weights at
#: 2 <= M <= 256 and >= 32 groups per row at M > 1, ``stream_takes_tile`` in
#: ``correction_variant_stream.cu``; wide: ``wide_takes`` in ``correction_variant_wide.cu``,
#: and at M <= 4 one kernel, corr_decode, summing A itself), the row is named by the one that
#: ran; "a?": a stage the variant skips at some shapes (wide's a_sum at decode), no row there
VARIANT_KERNELS = {"two_kernel_lean": ("a_group_sum", "correction_accum"),
                   "side_stream": ("asum", "corr_tile"), "fused": ("corr_tile+sum",),
                   "stream": ("asum_flat", "corr_stream|corr_tile"),
                   "wide": ("asum_flat?", "corr_wide|corr_stream|corr_tile|corr_decode"),
                   "gsplit": ("asum_flat", "corr_gsplit|corr_wide|corr_stream|corr_tile"),
                   "blocked": ("asum_flat",
                               "corr_blocked|corr_gsplit|corr_wide|corr_stream|corr_tile"),
                   "fold": ("asum_flat?",
                            "corr_fold|corr_blocked|corr_gsplit|corr_wide|corr_stream|corr_tile")}


def stage_options(spec: str) -> list[str]:
    """The kernels one stage ``spec`` ("a", "a|b" or "a?") may launch."""
    return spec.rstrip("?").split("|")


def stage_kernel(spec: str, medians) -> str:
    """The kernel of one stage ``spec`` that the profile holds (the first alternative when
    it holds none)."""
    options = stage_options(spec)
    return next((k for k in options if k in medians), options[0])
TARGET = 1.5


def kernel_class(name: str) -> str | None:
    """The study's name for a profiler kernel name, None for any other kernel."""
    for fragment, short in KERNEL_NAMES:
        if fragment in name:
            return short
    return None


def kernel_bytes(kernel: str, M: int, N: int, K: int, group_size: int) -> int:
    """Bytes ``kernel`` must move at least once: fp16 A [M, K] and C [M, N], fp32 a_sum
    [M, G] and delta [G, N], G = K / group_size. The group sums read A and write a_sum;
    the accumulations read and write C and read delta and a_sum (or A, when they sum it
    themselves)."""
    G = K // group_size
    a, c, a_sum, delta = 2 * M * K, 2 * M * N, 4 * M * G, 4 * G * N
    table = {"a_group_sum": a + a_sum, "asum": a + a_sum, "asum_flat": a + a_sum,
             "correction_accum": 2 * c + a_sum + delta, "corr_tile": 2 * c + a_sum + delta,
             "corr_stream": 2 * c + a_sum + delta, "corr_wide": 2 * c + a_sum + delta,
             "corr_gsplit": 2 * c + a_sum + delta, "corr_blocked": 2 * c + a_sum + delta,
             "corr_fold": 2 * c + a + delta,
             "corr_tile+sum": 2 * c + a + delta, "corr_decode": 2 * c + a + delta, "empty": 0}
    if kernel not in table:
        raise ValueError(f"kernel {kernel!r} is not one of {', '.join(table)}")
    return table[kernel]


@dataclass(frozen=True)
class KernelRow:
    """One kernel of one variant at one shape, beside its floor."""

    case_id: str
    M: int
    N: int
    K: int
    group_size: int
    variant: str
    kernel: str
    time_us: float          # median device time per call (profiler)
    samples: int
    bytes: int
    bw_floor_us: float      # bytes / measured copy bandwidth
    empty_us: float         # the empty kernel's median device time, measured the same way
    floor_us: float         # max(bw_floor_us, empty_us)
    ratio: float            # time_us / floor_us
    within: bool            # ratio <= the target (1.5)
    l2: str                 # "warm" or "cold"
    note: str = ""
    copy_us: float = math.nan     # torch's device copy of the same bytes (profiler median)
    copy_ratio: float = math.nan  # time_us / max(floor_us, copy_us)


def medians_by_kernel(spans, variant: str) -> dict[str, tuple[float, int]]:
    """(median us, count) per study kernel name among profiler ``spans`` (name, start,
    duration) of ``variant``'s calls; other kernels (L2 flushes) are left out."""
    durs: dict[str, list[float]] = {}
    for name, _, dur in spans:
        k = kernel_class(name)
        if k is None:
            continue
        if k == "corr_tile" and variant == "fused":
            k = "corr_tile+sum"
        durs.setdefault(k, []).append(float(dur))
    return {k: (statistics.median(v), len(v)) for k, v in durs.items()}


def kernel_rows(case, variant: str, medians: dict[str, tuple[float, int]], copy_gbps: float,
                empty_us: float, l2: str, target: float = TARGET,
                copies: dict[int, float] | None = None) -> list[KernelRow]:
    """The rows of ``variant`` at ``case`` from its per-kernel medians; a kernel the
    variant should have launched and the profile lacks is a row with NaN time and a note.
    ``copies``: bytes -> the measured copy of that many bytes (us), for ``copy_ratio``."""
    rows = []
    for spec in VARIANT_KERNELS[variant]:
        kernel = stage_kernel(spec, medians)
        if spec.endswith("?") and kernel not in medians:
            continue                                     # a stage skipped at this shape
        t, n = medians.get(kernel, (math.nan, 0))
        nbytes = kernel_bytes(kernel, case.M, case.N, case.K, case.group_size)
        bw = nbytes / (copy_gbps * 1e3)                  # bytes / (GB/s) in us
        floor = max(bw, empty_us)
        ratio = t / floor if floor > 0 else math.nan
        copy = (copies or {}).get(nbytes, math.nan)
        rows.append(KernelRow(case.id, case.M, case.N, case.K, case.group_size, variant,
                              kernel, t, n, nbytes, bw, empty_us, floor, ratio,
                              bool(ratio <= target), l2,
                              "" if n else "not in the profile (not launched?)",
                              copy, t / max(floor, copy) if math.isfinite(copy) else math.nan))
    return rows


def summary_lines(rows: list[KernelRow], target: float = TARGET) -> list[str]:
    """Per (variant, kernel): shapes within the target, the median and worst ratio."""
    out = []
    keys = sorted({(r.variant, r.kernel) for r in rows})
    for variant, kernel in keys:
        sel = [r for r in rows if (r.variant, r.kernel) == (variant, kernel)]
        ratios = [r.ratio for r in sel if math.isfinite(r.ratio)]
        worst = max(sel, key=lambda r: r.ratio if math.isfinite(r.ratio) else math.inf)
        med = statistics.median(ratios) if ratios else math.nan
        copy = [r.copy_ratio for r in sel if math.isfinite(r.copy_ratio)]
        against_copy = (f"; vs the copy of its bytes: median {statistics.median(copy):.2f}, "
                        f"{sum(c <= target for c in copy)}/{len(copy)} within") if copy else ""
        out.append(f"{variant:16s} {kernel:16s} within {target}x floor: "
                   f"{sum(r.within for r in sel)}/{len(sel)} shapes; ratio median {med:.2f}, "
                   f"worst {worst.ratio:.2f} at {worst.case_id}{against_copy}")
    return out


def _table(rows: list[KernelRow]) -> list[str]:
    head = (f"{'case':28s} {'variant':16s} {'kernel':16s} {'us':>8s} {'floor':>7s} "
            f"{'bw':>7s} {'empty':>6s} {'copy':>6s} {'ratio':>6s}")
    return [head] + [
        f"{r.case_id:28s} {r.variant:16s} {r.kernel:16s} {r.time_us:8.2f} {r.floor_us:7.2f} "
        f"{r.bw_floor_us:7.2f} {r.empty_us:6.2f} {r.copy_us:6.2f} {r.ratio:6.2f}"
        f"{'' if r.within else ' *'}"
        for r in rows]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="harness study kernels", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default="production")
    ap.add_argument("--filter", default=None, help="case filter expression")
    ap.add_argument("--variants", default=",".join(VARIANT_KERNELS),
                    help=f"comma list of {', '.join(VARIANT_KERNELS)}")
    ap.add_argument("--reps", type=int, default=50, help="profiled calls per variant (>= 5)")
    ap.add_argument("--cold-l2", action="store_true", help="flush L2 between calls")
    ap.add_argument("--target", type=float, default=TARGET)
    ap.add_argument("--out", default=None, help="CSV of every row")
    args = ap.parse_args(argv)
    bad = [v for v in args.variants.split(",") if v not in VARIANT_KERNELS]
    if bad:
        ap.error(f"--variants: {bad[0]!r} is not one of {', '.join(VARIANT_KERNELS)}")
    if args.reps < 5:
        ap.error(f"--reps must be >= 5, got {args.reps}")
    return args


def _inputs(case, dev: torch.device):
    """A (the case's fp16 activations), C (fp16 zeros) and a random fp32 delta [G, N]."""
    A = case_data(case).A.to(dev)
    gen = torch.Generator(device=dev).manual_seed(1000 + case.seed)
    delta = torch.randn(case.K // case.group_size, case.N, device=dev, dtype=torch.float32,
                        generator=gen) * 1e-3
    return A, torch.zeros(case.M, case.N, device=dev, dtype=torch.float16), delta


def _profile(fn, reps: int, flush: torch.Tensor | None):
    for _ in range(3):                      # first calls: scratch growth, module loading
        fn()
    if flush is None:
        return profiled_spans(fn, reps)

    def cold():
        flush.zero_()                       # its kernel is not one of ours: not counted
        fn()
    return profiled_spans(cold, reps)


def measure_all(args: argparse.Namespace) -> list[KernelRow]:
    """Every (case, variant, kernel) row of ``args`` on the current CUDA device."""
    dev = torch.device("cuda", torch.cuda.current_device())
    ext = extension()
    copy_gbps = measure_ceilings(dev).copy_gbps
    flush = (torch.empty(2 * l2_cache_bytes(dev), dtype=torch.uint8, device=dev)
             if args.cold_l2 else None)
    l2 = "cold" if args.cold_l2 else "warm"
    empty = medians_by_kernel(_profile(lambda: ext.launch_empty(dev.index, False), args.reps,
                                       flush), "empty")
    empty_us = empty.get("empty", (math.nan, 0))[0]
    print(f"harness study kernels: {torch.cuda.get_device_name(dev)}, copy {copy_gbps:.0f} "
          f"GB/s, empty kernel {empty_us:.2f} us (profiler), L2 {l2}, {args.reps} calls each",
          flush=True)
    rows: list[KernelRow] = []
    for case in MATRICES.cases(args.matrix, args.filter):
        if case.kind == "gemm":
            rows += _measure_case(ext, case, dev, args, flush, copy_gbps, empty_us, l2)
    return rows


def is_copy_activity(name: str) -> bool:
    """Whether a profiler device activity is torch's copy: a copy kernel, or the DMA copy
    CUPTI names "Memcpy DtoD (Device -> Device)" (on the H200 with torch 2.11 a same-dtype
    copy_ is the latter; "copy" is not a substring of "memcpy")."""
    low = name.lower()
    return "memcpy" in low or "copy" in low


def copy_us(nbytes: int, dev: torch.device, reps: int, flush) -> float:
    """Median device time (profiler) of torch's copy of ``nbytes // 2`` bytes into another
    buffer: ``nbytes`` moved, read plus write. NaN for no bytes or no copy kernel seen."""
    if nbytes < 2:
        return math.nan
    src = torch.ones(nbytes // 2, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    durs = [d for name, _, d in _profile(lambda: dst.copy_(src), reps, flush)
            if is_copy_activity(name)]
    return statistics.median(durs) if durs else math.nan


def _measure_case(ext, case, dev, args, flush, copy_gbps: float, empty_us: float,
                  l2: str) -> list[KernelRow]:
    A, C, delta = _inputs(case, dev)
    rows: list[KernelRow] = []
    sizes = {kernel_bytes(k, case.M, case.N, case.K, case.group_size)
             for v in args.variants.split(",") for spec in VARIANT_KERNELS[v]
             for k in stage_options(spec)}
    copies = {b: copy_us(b, dev, args.reps, flush) for b in sorted(sizes)}
    for variant in args.variants.split(","):
        def call(v=EXT_IDS[variant]):
            ext.correction_variant(A, C, delta, v)
        try:
            spans = _profile(call, args.reps, flush)
        except RuntimeError as exc:          # the extension's one-line refusal of a shape
            rows += [replace(r, note=f"not run: {str(exc).splitlines()[0][:160]}")
                     for r in kernel_rows(case, variant, {}, copy_gbps, empty_us, l2,
                                          args.target, copies)]
            continue
        rows += kernel_rows(case, variant, medians_by_kernel(spans, variant), copy_gbps,
                            empty_us, l2, args.target, copies)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure (GPU) and print the table; the CSV with ``--out``."""
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("harness study kernels: needs a CUDA GPU (none is visible)", file=sys.stderr)
        return 2
    rows = measure_all(args)
    for line in _table(rows) + [""] + summary_lines(rows, args.target):
        print(line)
    if args.out:
        pd.DataFrame([asdict(r) for r in rows]).to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0
