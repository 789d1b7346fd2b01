"""Rotated copies of a case's operands, so timed calls read weights that are not in L2.

Decode shapes are bandwidth-bound, and an int4 8192x8192 weight (32 MiB) fits in an
H200's 60 MiB L2: timing one buffer over and over measures the cache, not HBM. The runner
therefore times calls over ``P`` copies of (prepared weight, A, C); call ``i`` uses copy
``i % P``. ``plan_copies`` picks P so that the copies' bytes exceed ``3 x L2`` (then a
copy's lines are evicted before it comes round again), capped by ``max_copies`` and by a
memory budget; a plan that cannot reach 3 x L2 says so (``l2_cold`` False) and the
roofline's bandwidth floor is then not a hard limit for that row.

Copy 0 is the ``Prepared`` from ``GemmPath.prepare`` (timed as load time); the others are
``clone_prepared`` deep copies: every tensor reachable from ``Prepared.state`` and the
source weight is cloned (dicts, lists, tuples and dataclasses are walked), everything
else is shared. A path whose state holds tensors inside other objects keeps sharing those
(they are then not rotated); say so in the path's ``Prepared.notes``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from harness.kernels.base import Prepared

L2_COLD_FACTOR = 3
DEFAULT_MAX_COPIES = 1024


@dataclass(frozen=True)
class RotationPlan:
    copies: int
    bytes_per_copy: int
    l2_bytes: int
    working_set_bytes: int
    l2_cold: bool           # working set >= 3 x L2 (or no cache to defeat: CPU mode)
    note: str = ""


def plan_copies(bytes_per_call: int, l2_bytes: int, *, max_copies: int = DEFAULT_MAX_COPIES,
                mem_budget_bytes: int | None = None,
                mem_per_copy: int | None = None) -> RotationPlan:
    """Copies needed so that copies x bytes_per_call > 3 x l2_bytes (+1 for margin)."""
    if bytes_per_call <= 0:
        raise ValueError(f"bytes_per_call: must be positive, got {bytes_per_call}")
    if l2_bytes <= 0:
        return RotationPlan(1, bytes_per_call, 0, bytes_per_call, True, "no L2 to defeat")
    need = math.floor(L2_COLD_FACTOR * l2_bytes / bytes_per_call) + 1
    copies = min(need, max_copies)
    note = ""
    if copies < need:
        note = f"copies capped at {max_copies}"
    if mem_budget_bytes is not None:
        per = mem_per_copy or bytes_per_call
        fit = max(1, mem_budget_bytes // per)
        if fit < copies:
            copies, note = int(fit), f"copies capped at {fit} by the memory budget"
    ws = copies * bytes_per_call
    cold = ws > L2_COLD_FACTOR * l2_bytes
    if not cold:
        note = (note + "; " if note else "") + (
            f"working set {ws / 2**20:.1f} MiB < 3 x L2 ({l2_bytes / 2**20:.0f} MiB): "
            "rotated copies may hit L2")
    return RotationPlan(int(copies), int(bytes_per_call), int(l2_bytes), int(ws), cold, note)


def _clone(obj, memo: dict):
    if isinstance(obj, torch.Tensor):
        key = id(obj)
        if key not in memo:                       # keep aliasing inside one copy
            memo[key] = obj.clone()
        return memo[key]
    if isinstance(obj, dict):
        return type(obj)((k, _clone(v, memo)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_clone(v, memo) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_clone(v, memo) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: _clone(getattr(obj, f.name), memo)
                   for f in dataclasses.fields(obj) if f.init}
        try:
            return dataclasses.replace(obj, **changes)
        except (TypeError, ValueError):
            return obj
    return obj


def clone_prepared(prepared: Prepared) -> Prepared:
    """A deep copy of ``prepared`` whose tensors are fresh device buffers (same values)."""
    memo: dict = {}
    return Prepared(
        path=prepared.path, weight=_clone(prepared.weight, memo), device=prepared.device,
        state=_clone(prepared.state, memo), input_dtype=prepared.input_dtype,
        output_dtype=prepared.output_dtype, extra_bytes=prepared.extra_bytes,
        prepare_seconds=prepared.prepare_seconds, notes=prepared.notes,
    )


def prepared_nbytes(prepared: Prepared) -> int:
    """Device bytes of every distinct tensor reachable from ``prepared`` (weight + state)."""
    seen: dict[int, int] = {}

    def walk(obj):
        if isinstance(obj, torch.Tensor):
            seen[id(obj)] = obj.numel() * obj.element_size()
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name))

    walk(prepared.weight)
    walk(prepared.state)
    return sum(seen.values())


@dataclass(eq=False)
class Operands:
    """P rotated copies of (prepared, A, out); ``step(i)`` runs call i on copy i % P."""

    prepared: list[Prepared]
    A: list[torch.Tensor]
    out: list[torch.Tensor]

    @property
    def copies(self) -> int:
        return len(self.prepared)

    def step_fn(self, run):
        """``step(i)`` calling ``run(prepared, A, out)`` on copy i % P."""
        prepared, A, out, p = self.prepared, self.A, self.out, len(self.prepared)

        def step(i: int):
            j = i % p
            return run(prepared[j], A[j], out[j])

        return step


def build_operands(prepared: Prepared, A: torch.Tensor, copies: int) -> Operands:
    """Copy 0 is ``prepared``/``A`` themselves; outputs are fresh buffers (NaN-filled)."""
    if copies < 1:
        raise ValueError(f"copies: must be >= 1, got {copies}")
    M, N = A.shape[0], prepared.N
    preps = [prepared] + [clone_prepared(prepared) for _ in range(copies - 1)]
    acts = [A] + [A.clone() for _ in range(copies - 1)]
    outs = [torch.full((M, N), float("nan"), dtype=prepared.output_dtype, device=A.device)
            for _ in range(copies)]
    return Operands(preps, acts, outs)
