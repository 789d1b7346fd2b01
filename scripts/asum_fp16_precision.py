"""What marlin_asym's correction loses if its group sums come out of Marlin as fp16.

A way to drop the group-sum kernel (and the side stream, the join and one launch) is to
let unmodified Marlin compute the sums itself: append columns to the packed weight whose
dequantized values are 1 on one group's rows and 0 elsewhere (code 9 at scale 1 under the
q - 8 formula), so that Marlin's extra output columns are a_sum[M, G]. Marlin accumulates
in fp32 but writes fp16, so the correction would use fp16-rounded group sums. This
measures, on the CPU, what that rounding costs against issue 41's accuracy bound (the
correction within 2 fp16 ULPs of exact), for every production shape up to ``--max-m``:

* Marlin's output emulated as fp16(A @ W_implied in fp32);
* today: C = fp16(C_marlin + a_sum_fp32 @ delta), the sums in fp32;
* the extra-columns design: the same with a_sum rounded to fp16 first;
* per design: the correction's error (``studies.correction_bench.correction_ulps``: ULPs
  of max(|exact|, |C_marlin|, |correction|), the study's ``max_corr_ulp``) and the
  output's scale-aware error against the fp64 reference (``rms_ulp_error``, max and p99,
  what the gate reads).

    python scripts/asum_fp16_precision.py [--matrix production] [--max-m 64] [--csv OUT]

The timing side (Marlin on N + 128 or N + 256 columns, the extra column tile it needs) is
not measured here: that needs a GPU.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd
import torch

from harness.cases import MATRICES
from harness.cases.data import case_data
from harness.kernels.marlin.pack import marlin_pack_asymmetric
from harness.kernels.reference import a_group_sum, implied_weight, reference_fp64
from harness.measure.accuracy import rms_ulp_error
from harness.studies.correction_bench import correction_ulps

ULP_BUDGET = 2.0


def measure(case) -> dict:
    """Both designs' errors on one case (see the module docstring)."""
    data = case_data(case)
    A, weight = data.A, data.weight
    pack = marlin_pack_asymmetric(weight)
    ref = reference_fp64(A, weight)
    c_marlin = (A.float() @ implied_weight(pack).float()).half()
    a_sum = a_group_sum(A, pack.group_size)
    delta = pack.delta.double()
    corr_ref = a_sum @ delta
    row = {"case_id": case.id, "M": case.M, "N": case.N, "K": case.K,
           "groups": a_sum.shape[1]}
    for name, sums in (("fp32", a_sum.float()), ("fp16", a_sum.half())):
        out = (c_marlin.float() + sums.float() @ delta.float()).half()
        rms = rms_ulp_error(out.numpy(), ref.numpy())
        row[f"{name}_corr_ulp_max"] = float(correction_ulps(out, c_marlin, corr_ref).max())
        row[f"{name}_rms_ulp_max"] = float(np.max(rms))
        row[f"{name}_rms_ulp_p99"] = float(np.percentile(rms, 99))
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--matrix", default="production")
    p.add_argument("--max-m", type=int, default=64, help="largest M measured (CPU time)")
    p.add_argument("--filter", default=None, help="case filter expression")
    p.add_argument("--csv", default=None, help="write every row here")
    a = p.parse_args(argv)
    torch.manual_seed(0)
    cases = [c for c in MATRICES.cases(a.matrix, a.filter) if c.kind == "gemm" and c.M <= a.max_m]
    if not cases:
        print(f"asum_fp16_precision: no gemm case of {a.matrix!r} with M <= {a.max_m}",
              file=sys.stderr)
        return 2
    df = pd.DataFrame([measure(c) for c in cases])
    if a.csv:
        df.to_csv(a.csv, index=False)
    df["per_column"] = df["groups"] == 1
    for per_col, part in df.groupby("per_column"):
        what = "per-column (G = 1)" if per_col else "grouped (G > 1)"
        for name in ("fp32", "fp16"):
            worst = part[f"{name}_corr_ulp_max"].max()
            print(f"{what:18s} a_sum {name}: correction max {worst:7.2f} ULP "
                  f"({'within' if worst <= ULP_BUDGET else 'beyond'} {ULP_BUDGET:g}); output "
                  f"rms-ULP p99 median {part[f'{name}_rms_ulp_p99'].median():.2f}, "
                  f"max {part[f'{name}_rms_ulp_p99'].max():.2f}  ({len(part)} shapes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
