"""Does a row's graph-mode time depend on where its operands were allocated? (issue 16)

The fp16_cache row M256-N2048-K8192 moved 3-6% between bench processes of one build on
H200s, and in one process the planted slowdown's own timer read the same GEMM at
20.3-20.9 us for different allocations of the same shape (docs/measurement.md §9.5). This
script sets a row up for timing ``--allocations`` times in ONE process, exactly as the
bench does (``harness.measure.single.setup_timing``: prepared weights, rotated copies,
the bench's graph timer at its ``graph_idle_ratio``), keeping every earlier set-up alive
and a spacer of a random size between them, so each set-up's operands land at new
addresses. Each set-up is timed in
``--batches`` batches (median and IQR of the per-call µs). If the spread between set-ups
matches the spread seen between processes, the between-process noise of the row is where
its buffers land, and a timer that samples several placements per row would remove it.

    python scripts/placement_spread.py --filter "M == 256 and N == 2048 and K == 8192" \
        --paths fp16_cache --allocations 8 --out placement.csv
"""

from __future__ import annotations

import csv
import random
import statistics
import sys

import torch

from harness.config import load_settings
from harness.measure.single import setup_timing
from harness.studies.study_cli import case_path_parser, case_paths


def main(argv: list[str] | None = None) -> int:
    ap = case_path_parser("placement_spread.py", __doc__.splitlines()[0], paths="fp16_cache")
    ap.add_argument("--allocations", type=int, default=8)
    ap.add_argument("--batches", type=int, default=41)
    ap.add_argument("--seed", type=int, default=0)
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
        medians = []
        for a in range(args.allocations):
            keep.append(torch.empty(rng.randrange(1, 64 << 20), dtype=torch.uint8, device=device))
            setup = setup_timing(case, path, device, "graph")
            setup.timer.idle_ratio = idle            # the bench's duty cycle
            times = [setup.batch() for _ in range(args.batches + 3)][3:]
            q1, med, q3 = statistics.quantiles(times, n=4)
            medians.append(med)
            rows.append({"case": case.id, "path": path.name, "allocation": a,
                         "copies": setup.operands.copies, "calls": setup.calls,
                         "median_us": round(med, 4), "iqr_us": round(q3 - q1, 4)})
            keep.append(setup)
        lo, hi = min(medians), max(medians)
        print(f"{case.id} {path.name}: {args.allocations} set-ups, median of medians "
              f"{statistics.median(medians):.3f} us, range {lo:.3f}-{hi:.3f} "
              f"({hi / lo - 1:.2%}), each {', '.join(f'{m:.2f}' for m in medians)}", flush=True)
    if args.out and rows:
        with open(args.out, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
