"""Checks and row fields the runner shares with ``single`` (one case for pytest-benchmark):
one-line error text for a row, NaN-poisoned runs, the accuracy and timing columns.
"""

from __future__ import annotations

import gc
from dataclasses import replace

import torch

from harness.kernels.base import KernelReturnCode
from harness.results.schema import ResultRow

from .timing import TimingResult


class CheckFailed(RuntimeError):
    """An accuracy or integrity check the runner makes itself failed (one-line reason)."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def describe_error(exc: BaseException) -> str:
    """One line for the ``error`` column."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "CUDA out of memory: " + str(exc).splitlines()[0][:200]
    if isinstance(exc, (KernelReturnCode, CheckFailed)):
        return str(exc)
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def ulp_dtype(dtype: torch.dtype) -> str:
    return "bfloat16" if dtype == torch.bfloat16 else "float16"


def _run_poisoned(path, prepared, A, M: int, N: int, device: torch.device) -> torch.Tensor:
    """One run of ``path`` into a fresh NaN-poisoned output, synchronised."""
    out = torch.full((M, N), float("nan"), dtype=prepared.output_dtype, device=device)
    path.run(prepared, A, out)
    _sync(device)
    return out


def _nonfinite_message(acc, what: str) -> str:
    return (f"{what}: {acc.nonfinite} of {acc.n} output elements are non-finite "
            "(the output was NaN-poisoned before the run: unwritten or NaN)")


def _sync_quietly(device: torch.device) -> None:
    try:
        _sync(device)
    except Exception:
        pass
    _free(device)


def _accuracy_fields(acc) -> dict:
    return dict(rel_err=acc.rel_err, rel_fro_err=acc.rel_fro_err, max_ulp=acc.max_ulp,
                p99_ulp=acc.p99_ulp, mean_ulp=acc.mean_ulp,
                frac_ulp_over_budget=acc.frac_over_budget, nonfinite=acc.nonfinite,
                rms_ulp_p99=acc.rms_ulp_p99, rms_ulp_max=acc.rms_ulp_max)


def _with_timing(row: ResultRow, res: TimingResult) -> ResultRow:
    s = res.stats
    return replace(
        row, time_us_median=s.median, time_us_iqr=s.iqr, time_us_ci_lo=s.ci_lo,
        time_us_ci_hi=s.ci_hi, n_samples=s.n,
        samples_us=";".join(f"{x:.4f}" for x in res.samples_kept),
        clock_start_mhz=res.clock_start_mhz, clock_end_mhz=res.clock_end_mhz,
        clock_dropped=res.clock_dropped,
    )
