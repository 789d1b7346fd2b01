"""Accuracy over several runs on identical inputs: what a result row's accuracy columns hold.

A path is run ``runs`` times on the same prepared weight and the same activations, each
time into a fresh NaN-poisoned output. Outputs are compared bit for bit on the device.
The row's accuracy is that of the most frequent output (ties: the earliest), so a path
whose output varies between runs is not judged on one random draw; the worst run (most
non-finite elements, then the largest rel_fro_err, then the largest max ULP) is kept
beside it, and so is the number of distinct outputs.

Why: on the H200, quanto's Marlin at M = 1024 (g128) gave 4-8 distinct outputs in 20 runs
with rel_fro_err from 5.4e-4 (most runs) up to 1.7e-2 (docs/measurement.md §10); one run
per process made the gate's ULP comparison a coin toss there.

Extension point: ``accuracy_over_runs(run_once, ...)`` takes any zero-argument callable
that runs the path once and returns its (synchronised) output tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .accuracy import AccuracyStats, accuracy_stats
from .accuracy_torch import accuracy_stats_torch


@dataclass(frozen=True)
class RunsAccuracy:
    """``runs`` runs on identical inputs: the modal output's and the worst run's accuracy."""

    runs: int
    distinct: int
    modal: AccuracyStats
    worst: AccuracyStats
    worst_run: int                     # 1-based

    def row_fields(self) -> dict:
        """The ``ResultRow`` determinism columns."""
        return dict(accuracy_runs=self.runs, distinct_outputs=self.distinct,
                    worst_rel_err=self.worst.rel_err, worst_rel_fro_err=self.worst.rel_fro_err,
                    worst_max_ulp=self.worst.max_ulp)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` hold identical bytes (NaN payloads and -0.0 included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def _badness(acc: AccuracyStats) -> tuple:
    return (acc.nonfinite, acc.rel_fro_err, acc.max_ulp)


def _score(out, ref, ulp_budget: float, dtype: str) -> AccuracyStats:
    """Score on the device when both are tensors (``accuracy_torch``), else in NumPy."""
    if isinstance(out, torch.Tensor) and isinstance(ref, torch.Tensor):
        return accuracy_stats_torch(out, ref, ulp_budget, dtype)
    return accuracy_stats(out, ref, ulp_budget, dtype)


def accuracy_over_runs(run_once: Callable[[], torch.Tensor], ref, runs: int,
                       ulp_budget: float = 2.0, dtype: str = "float16") -> RunsAccuracy:
    """Run ``run_once`` ``runs`` times (>= 1) and score every distinct output against ``ref``.

    Each distinct output is scored once (accuracy_stats is the costly part); identical
    outputs share their first occurrence's score.
    """
    if runs < 1:
        raise ValueError(f"runs: need at least 1, got {runs}")
    distinct: list[list] = []                 # [output, count, first run index, stats]
    for i in range(runs):
        out = run_once()
        for entry in distinct:
            if same_bits(out, entry[0]):
                entry[1] += 1
                break
        else:
            distinct.append([out, 1, i, _score(out, ref, ulp_budget, dtype)])
    modal = max(distinct, key=lambda e: (e[1], -e[2]))
    worst = max(distinct, key=lambda e: (_badness(e[3]), -e[2]))
    return RunsAccuracy(runs=runs, distinct=len(distinct), modal=modal[3], worst=worst[3],
                        worst_run=worst[2] + 1)
