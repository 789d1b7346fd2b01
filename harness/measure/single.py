"""One (case, path, mode) set up for timing outside a sweep: the pytest-benchmark bridge.

``setup_timing`` does what the runner does before sampling (prepare, one NaN-poisoned
accuracy check against the fp64 reference, rotated operand copies beyond 3 x L2, the
batch size R, the mode's batch timer) and returns a ``TimingSetup`` whose ``batch()``
measures one batch device-side and returns the per-call time in microseconds.

``DeviceClock`` is a clock for pytest-benchmark's ``timer=`` that advances only by what
``advance`` adds: a pedantic round whose target runs one measured batch and advances the
clock by its per-call time makes pytest-benchmark record exactly the device-side per-call
time (its round duration is ``timer()`` after minus ``timer()`` before).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.cases.case import GemmCase
from harness.cases.data import case_data
from harness.kernels.base import GemmPath
from harness.kernels.reference import reference_fp64

from .accuracy import AccuracyStats, accuracy_stats
from .ceilings import l2_cache_bytes
from .roofline import bytes_moved
from .rotation import Operands, RotationPlan, build_operands, plan_copies, prepared_nbytes
from .runner import ULP_BUDGET, CheckFailed, ulp_dtype
from .timing import batch_calls, make_timer


class DeviceClock:
    """A monotonic clock (seconds) that only moves when ``advance`` is called."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"seconds: a clock cannot go back ({seconds!r})")
        self.now += seconds

    def __repr__(self) -> str:  # pytest-benchmark stores the timer's name
        return "harness.measure.single.DeviceClock (device-side per-call seconds)"


@dataclass(eq=False)
class TimingSetup:
    case: GemmCase
    path: GemmPath
    mode: str
    operands: Operands
    plan: RotationPlan
    calls: int
    accuracy: AccuracyStats
    timer: object

    def batch(self) -> float:
        """One measured batch: device-side microseconds per call."""
        return float(self.timer())

    def close(self) -> None:
        close = getattr(self.timer, "close", None)
        if close:
            close()


def setup_timing(case: GemmCase, path: GemmPath, device: torch.device, mode: str,
                 max_copies: int = 1024) -> TimingSetup:
    """Prepare ``path`` for ``case`` and build the ``mode`` timer (raises on any failure)."""
    device = torch.device(device)
    reason = path.unavailable_reason(device)
    if reason:
        raise CheckFailed(f"{path.name} is unavailable here: {reason}")
    data = case_data(case)
    prepared = path.prepare_timed(data.weight.to(device), device)
    A = data.A.to(device=device, dtype=prepared.input_dtype)
    out = torch.full((case.M, case.N), float("nan"), dtype=prepared.output_dtype, device=device)
    path.run(prepared, A, out)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    ref = reference_fp64(data.A.to(device), data.weight)
    acc = accuracy_stats(out, ref, ULP_BUDGET, ulp_dtype(prepared.output_dtype))
    if acc.nonfinite:
        raise CheckFailed(f"{acc.nonfinite} of {acc.n} output elements are non-finite after one "
                          "run on a NaN-poisoned output")
    per_call = bytes_moved(path, case).total
    if device.type == "cuda":
        mem = prepared_nbytes(prepared) + case.M * (case.K + case.N) * 2
        plan = plan_copies(per_call, l2_cache_bytes(device), max_copies=max_copies,
                           mem_per_copy=mem)
    else:
        plan = plan_copies(per_call, 0)
    ops = build_operands(prepared, A, plan.copies)
    step = ops.step_fn(path.run)
    pilot = make_timer("cpu" if mode == "cpu" else "cold", step, ops.copies, device)
    pilot()
    calls = batch_calls(mode, max(pilot(), 1e-3))
    timer = make_timer(mode, step, calls, device, span=ops.copies)
    return TimingSetup(case, path, mode, ops, plan, calls, acc, timer)
