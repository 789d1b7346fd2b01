"""Run-to-run determinism of each path: the same inputs, the same prepared weights, N runs.

A path whose output changes between runs on identical inputs has an accuracy that is a
random draw: a gate that compares one draw with the baseline's one draw fails by chance.
Upstream Marlin says so itself (its threadblocks reduce partial sums through global
memory under locks, "which can result in very slight nondeterminism"). This study
measures how slight, per shape:

    harness study determinism --matrix production --filter "M >= 256" \
        --paths marlin_asym,marlin_fused_zero,fp16_cache --runs 30 --csv out.csv

For each (case, path) the output of every run is compared bit for bit with the first
run's and each run's accuracy against the fp64 reference is computed. A row reports how
many distinct outputs there were, the fraction of elements that ever differed, the
largest ULP distance between two runs' elements, the spread (min / median / max) of the
accuracy metrics over the runs, and where the differing elements lie (how many output
rows and 64-column tiles they touch).
"""

from __future__ import annotations

import csv
import hashlib
import statistics
from dataclasses import asdict, dataclass

import numpy as np
import torch

from harness.cases.data import case_data
from harness.kernels.reference import reference_fp64
from harness.measure.accuracy import accuracy_stats, ulp_error
from harness.measure.runner import ulp_dtype

from .study_cli import case_path_parser, run_each


@dataclass(frozen=True)
class Determinism:
    """What N runs of one (case, path) on identical inputs produced."""

    case_id: str
    path: str
    runs: int
    distinct_outputs: int        # 1 = bitwise deterministic over these runs
    diff_frac: float             # elements that differed from run 1 in some run / all elements
    max_ulp_between: float       # largest |run_i - run_1| in ULPs of run 1's element
    diff_rows: int               # output rows holding a differing element
    diff_col_tiles: int          # 64-column tiles holding a differing element
    rel_fro_min: float
    rel_fro_median: float
    rel_fro_max: float
    max_ulp_min: float
    max_ulp_median: float
    max_ulp_max: float
    p99_ulp_min: float
    p99_ulp_max: float
    rel_err_min: float
    rel_err_max: float


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def measure(case, path, device: torch.device, runs: int, ulp_budget: float = 2.0) -> Determinism:
    """``runs`` runs of ``path`` on ``case``'s inputs, each into a fresh NaN-poisoned output."""
    if runs < 2:
        raise ValueError(f"runs: need at least 2 to compare, got {runs}")
    data = case_data(case)
    prepared = path.prepare_timed(data.weight.to(device), device)
    A = data.A.to(device=device, dtype=prepared.input_dtype)
    ref = reference_fp64(data.A.to(device), data.weight)
    dtype = ulp_dtype(prepared.output_dtype)
    first = None
    digests: dict = {}
    stats = []
    ever = np.zeros((case.M, case.N), dtype=bool)
    max_between = 0.0
    for _ in range(runs):
        out = torch.full((case.M, case.N), float("nan"), dtype=prepared.output_dtype, device=device)
        path.run(prepared, A, out)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        key = _digest(out)
        if key not in digests:            # identical outputs have identical accuracy
            digests[key] = accuracy_stats(out, ref, ulp_budget, dtype)
        stats.append(digests[key])
        host = out.float().cpu().numpy()
        if first is None:
            first = host
            continue
        differs = host != first
        if differs.any():
            ever |= differs
            between = float(np.nanmax(ulp_error(host[differs], first[differs], dtype)))
            max_between = max(max_between, between)
    rows, cols = np.nonzero(ever)
    fro = [s.rel_fro_err for s in stats]
    mx = [s.max_ulp for s in stats]
    p99 = [s.p99_ulp for s in stats]
    rel = [s.rel_err for s in stats]
    return Determinism(
        case_id=case.id, path=path.name, runs=runs, distinct_outputs=len(digests),
        diff_frac=float(ever.mean()), max_ulp_between=max_between,
        diff_rows=int(np.unique(rows).size), diff_col_tiles=int(np.unique(cols // 64).size),
        rel_fro_min=min(fro), rel_fro_median=statistics.median(fro), rel_fro_max=max(fro),
        max_ulp_min=min(mx), max_ulp_median=statistics.median(mx), max_ulp_max=max(mx),
        p99_ulp_min=min(p99), p99_ulp_max=max(p99), rel_err_min=min(rel), rel_err_max=max(rel),
    )


def main(argv: list[str] | None = None) -> int:
    ap = case_path_parser("harness study determinism", __doc__,
                          "marlin_asym,marlin_fused_zero,fp16_cache")
    ap.add_argument("--runs", type=int, default=20, help="runs per (case, path) (default 20)")
    ap.add_argument("--csv", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error(f"--runs: need at least 2 runs to compare, got {args.runs}")
    device = (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
              else torch.device("cpu"))
    print(f"{'case':28s} {'path':18s} {'distinct':>8s} {'diff frac':>9s} {'ulp btw':>9s} "
          f"{'rows':>5s} {'tiles':>5s} {'rel_fro min/med/max':>28s} {'max_ulp min/max':>20s}")

    def show(d: Determinism) -> None:
        print(f"{d.case_id:28s} {d.path:18s} {d.distinct_outputs:8d} {d.diff_frac:9.2e} "
              f"{d.max_ulp_between:9.3g} {d.diff_rows:5d} {d.diff_col_tiles:5d} "
              f"{d.rel_fro_min:9.3g}/{d.rel_fro_median:9.3g}/{d.rel_fro_max:9.3g} "
              f"{d.max_ulp_min:9.3g}/{d.max_ulp_max:9.3g}", flush=True)

    rows = run_each(ap, args, device, lambda c, p: measure(c, p, device, args.runs), show)
    if args.csv and rows:
        with open(args.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(asdict(rows[0])))
            w.writeheader()
            w.writerows(asdict(r) for r in rows)
    return 0

