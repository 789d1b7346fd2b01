"""CSV reports of a gate result: one row per (case, path, mode) with every metric, the
verdict, the reasons and the deltas against the baseline.

Two layouts, both carrying ``report_schema_version`` in every row:
  * ``report_frame``: the current run's full row (all ``ResultRow`` columns but the raw
    samples) plus ``baseline_<metric>`` and the deltas;
  * ``side_by_side_frame``: identity columns, then ``<A>_<metric>`` / ``<B>_<metric>``
    pairs for the compared metrics (``harness compare``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..results.schema import column_names
from ..results.store import atomic_write_text
from .verdicts import GateResult, RowVerdict

REPORT_SCHEMA_VERSION = 1

IDENTITY = ("matrix", "case_id", "path", "mode", "M", "N", "K", "group_size", "seed", "kind",
            "tags", "role")
#: Metrics shown for both sides of a comparison (rms_ulp_p99 is the gated ULP figure;
#: the per-element max_ulp / p99_ulp follow as detail).
COMPARED = ("status", "dispatch_path", "time_us_median", "n_samples", "tflops", "pct_roofline",
            "rel_err", "rms_ulp_p99", "rms_ulp_max", "max_ulp", "p99_ulp", "nonfinite",
            "correction_overhead_pct", "extra_bytes", "ppl")
#: The gate's columns after the metrics, in order.
GATE_COLUMNS = ("delta_time_pct", "p_value", "threshold_pct", "noise_margin_pct", "delta_rel_err",
                "delta_rms_ulp_p99", "delta_max_ulp", "delta_p99_ulp", "ppl_drift_vs_baseline",
                "remeasured")


def _gate_columns(v: RowVerdict) -> dict:
    def pct(x: float) -> float:
        return x * 100.0 if math.isfinite(x) else math.nan

    return {
        "delta_time_pct": pct(v.time_change), "p_value": v.p_value,
        "threshold_pct": pct(v.threshold), "noise_margin_pct": pct(v.margin),
        "delta_rel_err": v.delta_rel_err, "delta_rms_ulp_p99": v.delta_rms_ulp_p99,
        "delta_max_ulp": v.delta_max_ulp,
        "delta_p99_ulp": v.delta_p99_ulp, "ppl_drift_vs_baseline": v.ppl_drift,
        "remeasured": v.remeasured,
    }


def _head(v: RowVerdict) -> dict:
    return {"report_schema_version": REPORT_SCHEMA_VERSION, "verdict": str(v.verdict),
            "fails": v.fails, "reasons": "; ".join(v.reasons)}


def report_records(result: GateResult) -> list[dict]:
    records = []
    metrics = [c for c in column_names() if c not in IDENTITY and c != "samples_us"]
    for v in result.verdicts:
        ref = v.row.to_dict()
        rec = _head(v)
        rec.update({c: ref[c] for c in IDENTITY})
        cur = v.current.to_dict() if v.current is not None else None
        rec.update({c: (cur[c] if cur is not None else None) for c in metrics})
        base = v.baseline.to_dict() if v.baseline is not None else {}
        rec.update({f"baseline_{c}": base.get(c) for c in COMPARED})
        rec.update(_gate_columns(v))
        records.append(rec)
    return records


def report_frame(result: GateResult):
    """pandas DataFrame of ``report_records`` (column order fixed, also when empty)."""
    metrics = [c for c in column_names() if c not in IDENTITY and c != "samples_us"]
    cols = (["report_schema_version", "verdict", "fails", "reasons", *IDENTITY, *metrics]
            + [f"baseline_{c}" for c in COMPARED] + list(GATE_COLUMNS))
    return pd.DataFrame(report_records(result), columns=cols)


def side_by_side_frame(result: GateResult, labels: Sequence[str] = ("A", "B")):
    """Identity, ``A_x``/``B_x`` pairs for ``COMPARED`` metrics, deltas and the verdict.

    ``labels[0]`` is the baseline side, ``labels[1]`` the current side.
    """
    la, lb = labels
    records = []
    for v in result.verdicts:
        ref = v.row.to_dict()
        rec = _head(v)
        rec.update({c: ref[c] for c in IDENTITY})
        a = v.baseline.to_dict() if v.baseline is not None else {}
        b = v.current.to_dict() if v.current is not None else {}
        for c in COMPARED:
            rec[f"{la}_{c}"] = a.get(c)
            rec[f"{lb}_{c}"] = b.get(c)
        rec.update(_gate_columns(v))
        records.append(rec)
    cols = (["report_schema_version", "verdict", "fails", "reasons", *IDENTITY]
            + [f"{side}_{c}" for c in COMPARED for side in (la, lb)] + list(GATE_COLUMNS))
    return pd.DataFrame(records, columns=cols)


def write_frame_csv(path: str | Path, frame) -> Path:
    """Atomically write a report frame (NaN and None as empty cells)."""
    return atomic_write_text(path, frame.to_csv(index=False, na_rep="", lineterminator="\n"))
