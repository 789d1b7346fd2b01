"""Does a row's graph-mode time depend on where its operands were allocated? (issue 16)

The fp16_cache row M256-N2048-K8192 moved 3-6% between bench processes of one build on
H200s (the planted slowdown's misses, docs/measurement.md §9.5/§9.6). This script sets a
row up for timing ``--allocations`` times in ONE process, exactly as the bench does
(``harness.measure.single.setup_timing``: prepared weights, rotated copies, the bench's
graph timer at its ``graph_idle_ratio``), keeping every earlier set-up alive with a spacer
of a random size before it, so each set-up's operands land at new addresses, and times
each set-up in ``--batches`` batches (median and IQR of the per-call µs).
``--stagger-mb N`` also rebuilds each set-up's copies 1..P-1 with spacers between them and
times that set right after the bench's: if the spread between set-ups were where the
copies lie, the two sets of one set-up would disagree as much as two set-ups do.

Measured (H200, 2026-12-04, §9.6): the set-ups of one process spread as far as processes
do (up to 5.8% at M256-N2048-K8192), but the staggered copies tracked their set-up's
level (correlation 0.88-0.97, their ratio's sd 0.4-0.85%): the level belongs to the
moment it is measured (or to copy 0, the one buffer both sets share), not to the copies'
placement.

    python scripts/placement_spread.py --filter "M == 256 and N == 2048 and K == 8192" \
        --paths fp16_cache --allocations 8 --stagger-mb 2 --out placement.csv
"""

from __future__ import annotations

import csv
import random
import statistics
import sys

import torch

from harness.config import load_settings
from harness.measure.rotation import Operands, clone_prepared
from harness.measure.single import setup_timing
from harness.measure.timers import make_timer
from harness.studies.study_cli import case_path_parser, case_paths


def staggered(ops: Operands, unit: int, keep: list) -> Operands:
    """``ops`` rebuilt (copy 0 shared) with a spacer of ``unit`` x (1, 3, 2, 5, 4, 7, 6, 8)
    bytes before each further copy (kept alive in ``keep``), so its copies start at other
    offsets from one another than the bench's."""
    steps = (1, 3, 2, 5, 4, 7, 6, 8)
    prepared, A = [ops.prepared[0]], [ops.A[0]]
    for i in range(ops.copies - 1):
        keep.append(torch.empty(unit * steps[i % len(steps)], dtype=torch.uint8,
                                device=ops.A[0].device))
        prepared.append(clone_prepared(ops.prepared[0]))
        A.append(ops.A[0].clone())
    return Operands(prepared, A, [torch.full_like(o, float("nan")) for o in ops.out])


def main(argv: list[str] | None = None) -> int:
    ap = case_path_parser("placement_spread.py", __doc__.splitlines()[0], paths="fp16_cache")
    ap.add_argument("--allocations", type=int, default=8)
    ap.add_argument("--batches", type=int, default=41)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stagger-mb", type=int, default=0,
                    help="also time each set-up's copies rebuilt with spacers of this many "
                         "MiB x (1, 3, 2, 5, ...) between them")
    ap.add_argument("--out", default=None, help="CSV of every set-up's median")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("placement_spread.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    rng = random.Random(args.seed)
    rows, keep = [], []
    idle = load_settings().graph_idle_ratio
    for case, path in case_paths(args, device):
        medians: dict[str, list[float]] = {}
        for a in range(args.allocations):
            keep.append(torch.empty(rng.randrange(1, 64 << 20), dtype=torch.uint8, device=device))
            setup = setup_timing(case, path, device, "graph")
            setup.timer.idle_ratio = idle            # the bench's duty cycle
            timers = {"plain": setup.timer}
            if args.stagger_mb:                      # the same set-up, copies staggered
                ops = staggered(setup.operands, args.stagger_mb << 20, keep)
                timers["staggered"] = make_timer("graph", ops.step_fn(path.run), setup.calls,
                                                 device, span=ops.copies, idle_ratio=idle)
                keep.append(ops)
            for kind, timer in timers.items():
                times = [float(timer()) for _ in range(args.batches + 3)][3:]
                q1, med, q3 = statistics.quantiles(times, n=4)
                medians.setdefault(kind, []).append(med)
                rows.append({"case": case.id, "path": path.name, "copies_layout": kind,
                             "allocation": a, "copies": setup.operands.copies,
                             "calls": setup.calls, "median_us": round(med, 4),
                             "iqr_us": round(q3 - q1, 4)})
            keep.append(setup)
        for kind, meds in medians.items():
            lo, hi = min(meds), max(meds)
            print(f"{case.id} {path.name} {kind}: {args.allocations} set-ups, median of "
                  f"medians {statistics.median(meds):.3f} us, range {lo:.3f}-{hi:.3f} "
                  f"({hi / lo - 1:.2%}), each {', '.join(f'{m:.2f}' for m in meds)}",
                  flush=True)
    if args.out and rows:
        with open(args.out, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
