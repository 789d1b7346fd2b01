"""Accuracy over several runs on identical inputs (harness.measure.reruns) and the runner's
use of it: the modal output is what a row's accuracy reports, the worst run sits beside it,
and a path that varies is seen to vary."""

from __future__ import annotations

import math

import pytest
import torch

from harness.cases.case import GemmCase
from harness.config import load_settings
from harness.kernels.base import GemmPath, PathRegistry, Prepared, int4_weight_bytes
from harness.measure.reruns import accuracy_over_runs, same_bits
from harness.measure.runner import RunContext, Runner

REF = torch.linspace(1.0, 2.0, 64, dtype=torch.float64).reshape(8, 8)


def _seq(*outs):
    it = iter(outs)
    return lambda: next(it)


def _out(noise_at=None, by=0.0):
    o = REF.clone().half()
    if noise_at is not None:
        o.view(-1)[noise_at] += by
    return o


def test_a_deterministic_run_has_one_output_and_the_worst_is_the_modal():
    r = accuracy_over_runs(_seq(*[_out() for _ in range(4)]), REF, 4)
    assert (r.runs, r.distinct, r.worst_run) == (4, 1, 1)
    assert r.modal == r.worst
    assert r.row_fields()["accuracy_runs"] == 4 and r.row_fields()["distinct_outputs"] == 1


def test_the_most_frequent_output_is_reported_and_the_worst_run_is_kept():
    good, bad, worse = _out(), _out(5, 0.25), _out(7, 0.5)
    r = accuracy_over_runs(_seq(bad, good, good, worse, good), REF, 5)
    assert r.distinct == 3
    assert r.modal.rel_fro_err < r.worst.rel_fro_err
    assert r.worst_run == 4                              # `worse`, the 4th run
    assert r.modal.max_ulp < 1.0 < r.worst.max_ulp       # the bad runs are far off
    assert r.row_fields()["worst_rel_fro_err"] == r.worst.rel_fro_err


def test_ties_go_to_the_earliest_output_and_nan_is_the_worst_run():
    nan = _out()
    nan[0, 0] = float("nan")
    r = accuracy_over_runs(_seq(_out(3, 0.25), nan), REF, 2)
    assert r.modal.nonfinite == 0 and r.modal.max_ulp > 1.0    # run 1 wins the tie
    assert r.worst.nonfinite == 1 and r.worst_run == 2


def test_same_bits_is_bitwise():
    a = torch.tensor([0.0, float("nan"), 1.0], dtype=torch.float16)
    assert same_bits(a, a.clone())                       # NaN == NaN bit for bit
    b = a.clone()
    b[0] = -0.0
    assert not same_bits(a, b)                           # -0.0 differs from 0.0
    assert not same_bits(a, a.float())
    with pytest.raises(ValueError, match="runs"):
        accuracy_over_runs(_seq(), REF, 0)


class Exact(GemmPath):
    name, description = "exact", "fp32 torch matmul"
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 zero G*N*2"

    def weight_bytes(self, K, N, groups):       # the byte model the roofline asks for
        return int4_weight_bytes(K, N, groups, 4)

    def unavailable_reason(self, device):
        return None

    def prepare(self, weight, device):
        W = weight.dequantize(torch.float64).float().to(device)
        return Prepared(self.name, weight, device, state={"W": W, "n": 0})

    def run(self, prepared, A, out):
        out.copy_(A.float() @ prepared.state["W"])
        return out


class Flaky(Exact):
    """Every third run perturbs one output element: a race, as a deterministic fake."""
    name = "flaky"
    nondeterminism = "a documented reason"

    def run(self, prepared, A, out):
        super().run(prepared, A, out)
        prepared.state["n"] += 1
        if prepared.state["n"] % 3 == 2:
            out[0, 0] += 0.05 * out.abs().mean()   # far off for one element, small on average
        return out


def test_the_runner_reports_the_modal_accuracy_and_that_a_path_varied():
    reg = PathRegistry()
    for p in (Exact(), Flaky()):
        reg.register(p)
    fast = {"warmup_ms": 1, "max_case_seconds": 0.05, "min_samples": 5, "max_samples": 50,
            "target_rel_spread": 0.05, "accuracy_runs": 5}
    ctx = RunContext(matrix="unit", device=torch.device("cpu"),
                     settings=load_settings(overrides=fast),
                     modes=("cpu",), registry=reg, arch="cpu", device_name="cpu", commit="test")
    case = GemmCase(M=4, N=128, K=256, group_size=128, seed=9)
    rows = {r.path: r for r in Runner(ctx).run([case])}
    exact, flaky = rows["exact"], rows["flaky"]
    assert exact.status == flaky.status == "ok"
    assert (exact.accuracy_runs, exact.distinct_outputs, exact.nondeterminism_note) == (5, 1, "")
    assert exact.worst_rel_fro_err == exact.rel_fro_err
    assert (flaky.accuracy_runs, flaky.distinct_outputs) == (5, 2)
    assert flaky.nondeterminism_note == "a documented reason"
    assert flaky.rel_err == pytest.approx(exact.rel_err)          # 3 of 5 runs are exact
    assert flaky.worst_rel_fro_err > 3 * flaky.rel_fro_err
    assert math.isfinite(flaky.worst_max_ulp) and flaky.worst_max_ulp > flaky.max_ulp
