"""Test doubles: paths that misbehave on purpose (planted by ``planted.defects``).

Two kinds, both ordinary path objects the test suite builds and puts in a registry; the
product never reads a switch for them:

* ``WrappedPath`` behaves exactly like the path it wraps (and answers the whole path
  contract from it); each subclass plants one defect a real path could have:
  ``CachedOutputPath`` (returns a stale C), ``RacyOutputPath`` (one element comes out
  different on every other call, like a lost update), ``SlowdownPath`` (every call takes
  ``fraction`` longer), ``SideStreamPath`` (work escapes the caller's stream) and
  ``FaultPath`` (raises, runs out of memory, returns a non-zero code or writes NaN/Inf or
  leaves part of C unwritten on chosen calls).
* ``MarlinAsymPath`` subclasses with a bug in the Marlin path itself, through its load-time
  seams (``pack_weight``, ``kernel_groupsize``) or its call: ``OffByOneTilePackerPath``
  (the packer shifts every 16x16 tile one tile along N), ``WrongSignDeltaPath`` (the
  correction adds -delta), ``UntranslatedPerRowPath`` (a per-row weight reaches Marlin as
  groupsize K, not -1), ``CorrectionTwicePath`` (the correction is applied two times).
  The CUDA correction's flag defects need no subclass: ``MarlinAsymPath(correction_flags=)``.

Extension point: a new misbehaviour is a ``WrappedPath`` subclass overriding ``run`` (and
``prepare`` if it must), or a ``MarlinAsymPath`` subclass, planted with
``planted.defects.swapped_path``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from harness.kernels.base import GemmPath, KernelReturnCode, Prepared
from harness.kernels.build import extension
from harness.kernels.marlin.asym import MarlinAsymPath
from harness.kernels.marlin.pack import TILE, MarlinPack, pack_codes, unpack_codes
from harness.kernels.reference import apply_marlin_correction

from . import clock as planted_clock
from .sleep_sizing import eager_plan, size_sleep

#: The slowdown the ``slowdown_5pct`` defect plants.
SLOWDOWN = 0.05


class WrappedPath(GemmPath):
    """A path that behaves like ``inner`` (same name, role, rows, contract) unless a
    subclass says so."""

    def __init__(self, inner: GemmPath) -> None:
        self.inner = inner
        self.name, self.role, self.description = inner.name, inner.role, inner.description
        self.nondeterminism, self.is_marlin = inner.nondeterminism, inner.is_marlin
        self.kinds = inner.kinds
        self.device_types, self.min_capability = inner.device_types, inner.min_capability
        self.variants, self.weight_formula = inner.variants, inner.weight_formula

    def unavailable_reason(self, device: torch.device) -> str | None:
        return self.inner.unavailable_reason(device)

    def unsupported_reason(self, case) -> str | None:
        return self.inner.unsupported_reason(case)

    def implementation(self, device: torch.device) -> str:
        return self.inner.implementation(device)

    def weight_bytes(self, K: int, N: int, groups: int) -> int:
        return self.inner.weight_bytes(K, N, groups)

    def bytes_moved(self, case):
        return self.inner.bytes_moved(case)

    def flops(self, case) -> int:
        return self.inner.flops(case)

    def error_bound(self, case) -> tuple[float, str]:
        return self.inner.error_bound(case)

    def prepare(self, weight, device: torch.device) -> Prepared:
        return self.inner.prepare(weight, device)

    def run(self, prepared: Prepared, A: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return self.inner.run(prepared, A, out)

    def __getattr__(self, attr: str):      # e.g. marlin_asym's run_marlin_only
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)


# ----------------------------------------------------------------------------- Marlin defects
class OffByOneTilePackerPath(MarlinAsymPath):
    """The packer writes every 16x16 tile one tile along N: tile (kt, j) holds the codes of
    tile (kt, j - 1) (scales, sz and delta untouched)."""

    def pack_weight(self, weight, formula: str) -> MarlinPack:
        pack = super().pack_weight(weight, formula)
        codes = unpack_codes(pack.B, pack.K, pack.N)
        return replace(pack, B=pack_codes(torch.roll(codes, shifts=TILE, dims=1)))


class WrongSignDeltaPath(MarlinAsymPath):
    """The correction adds -delta instead of +delta (on every route: the pack carries it)."""

    def pack_weight(self, weight, formula: str) -> MarlinPack:
        pack = super().pack_weight(weight, formula)
        return replace(pack, delta=-pack.delta)


class UntranslatedPerRowPath(MarlinAsymPath):
    """A per-row weight reaches Marlin as groupsize K instead of -1 (TinyLoop's first bug:
    Marlin has no kernel for it and returns rc 2). The CPU emulation computes the same C
    either way; the dispatcher model shows the defect with ``translate_per_row=False``."""

    def kernel_groupsize(self, weight) -> int:
        return weight.group_size

    def pack_weight(self, weight, formula: str) -> MarlinPack:
        pack = super().pack_weight(weight, formula)
        return replace(pack, marlin_groupsize=weight.group_size)


class CorrectionTwicePath(MarlinAsymPath):
    """The asymmetric correction is applied two times (again after the path's own call)."""

    def run_variant(self, prepared, A, out, variant):
        super().run_variant(prepared, A, out, variant)    # raises on a non-zero Marlin rc
        pack = prepared.state["pack"]
        if prepared.device.type == "cpu":
            out.copy_(apply_marlin_correction(out, A, pack.delta, pack.group_size))
        else:
            extension().apply_correction(A, out, pack.delta, self.correction_flags)
        return out


# ----------------------------------------------------------------------------- wrappers
class CachedOutputPath(WrappedPath):
    """Computes C on the first call for a prepared weight, then returns that C forever."""

    def run(self, prepared, A, out):
        cached = prepared.state.get("_planted_cached_output")
        if cached is None or tuple(cached.shape) != tuple(out.shape):
            self.inner.run(prepared, A, out)
            prepared.state["_planted_cached_output"] = out.clone()
        else:
            out.copy_(cached)
        return out


class RacyOutputPath(WrappedPath):
    """``inner``, but every other call moves C[0, 0] by 5% of mean |C| (a lost update in a
    reduction): accurate on average, different bits between runs on identical inputs."""

    def run(self, prepared, A, out):
        self.inner.run(prepared, A, out)
        calls = prepared.state.get("_planted_racy_calls", 0) + 1
        prepared.state["_planted_racy_calls"] = calls
        if calls % 2 == 0:
            out[0, 0] += 0.05 * out.abs().mean()
        return out


class SlowdownPath(WrappedPath):
    """``inner`` plus ``fraction`` more time per call.

    CPU: a wait of ``fraction`` x the call's own time on ``planted.clock.current()`` (the
    host's clock: a busy wait, CPU paths being synchronous; or the fake timer's virtual one).
    GPU: ``torch.cuda._sleep`` (a device spin) after the inner call, sized on the first call
    for each M (the runner's untimed accuracy run; it synchronises, which a real path never
    does) the way the gate's graph-mode rows see time: ``planted.sleep_sizing.size_sleep``
    times the inner call over rotated copies with the bench's graph timer and measures the
    spin's share closed-loop; where the spin's node would cost more than that share, the
    spin goes after every ``period``-th call only, sized for ``period`` calls (the gate's
    graph rows time batches of many calls). ``plans_by_shape[(M, N, K)]``
    keeps what was measured, the slowdown to expect and the one measured, so a study (or
    the plugin's log) can report the slowdown it really planted. Falls back to events
    around single eager calls when a capture fails.
    """

    def __init__(self, inner: GemmPath, fraction: float = SLOWDOWN) -> None:
        super().__init__(inner)
        self.fraction = float(fraction)
        self.plans_by_shape: dict[tuple[int, int, int], list[dict]] = {}
        self.calls: dict[int, int] = {}
        #: plans shared by the processes of one job (``calibrate``); None: each its own
        self.plan_file: Path | None = None

    def run(self, prepared, A, out):
        if prepared.device.type != "cuda":
            clock = planted_clock.current()       # the host's, or the fake timer's virtual one
            t0 = clock.now()
            self.inner.run(prepared, A, out)
            clock.wait((clock.now() - t0) * self.fraction)
            return out
        period, cycles = self._spin(prepared, A, out)
        self.inner.run(prepared, A, out)
        # one count per M across the rotated copies of the weight (each a Prepared of its
        # own, its state deep-copied): per copy, a graph's spins varied by up to a spin per
        # copy, and the 3% plant read +5-6.5% on some rows (d2 of 2026-12-05)
        M = int(A.shape[0])
        self.calls[M] = self.calls.get(M, 0) + 1
        if self.calls[M] % period == 0:    # captured calls count too: R/period spins a graph
            torch.cuda._sleep(cycles)
        return out

    def _spin(self, prepared, A, out) -> tuple[int, int]:
        table = prepared.state.setdefault("_planted_sleep_cycles", {})
        M = int(A.shape[0])
        if M not in table:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError("SlowdownPath: not calibrated for this M before a graph capture")
            table[M] = self.calibrate(prepared, A, out)
        return table[M]

    def calibrate(self, prepared, A, out) -> tuple[int, int]:
        """Sleep cycles (and the spin's period) that make one call ``fraction`` slower as
        the gate's graph rows see it (``planted.sleep_sizing``: rotated copies, the bench's
        graph timer, the delivered share measured and corrected closed-loop); eager calls
        between events when the call cannot be captured. With ``plan_file`` set, a shape
        planned by an earlier process is planted as that process planned it: a real
        regression is the same code in every process of a job, and a plant sized anew per
        process read +3% to +30% on one 6-µs row across the seven B rounds of one A/B (d3
        of 2026-12-05)."""
        shape = (int(A.shape[0]), int(out.shape[1]), int(A.shape[1]))
        plan = read_plan(self.plan_file, shape, self.fraction)
        if plan is None:
            try:
                plan = size_sleep(self.inner.run, prepared, A, out, self.fraction)
            except Exception as exc:     # not capturable: single eager calls between events
                torch.cuda.synchronize()
                plan = eager_plan(self.inner.run, prepared, A, out, self.fraction)
                plan["graph_failed"] = f"{type(exc).__name__}: {exc}"[:300]
            write_plan(self.plan_file, shape, self.fraction, plan)
        self.plans_by_shape.setdefault(shape, []).append(plan)
        return int(plan.get("period", 1)), int(plan["cycles"])


def _plan_key(shape: tuple[int, int, int], fraction: float) -> str:
    return "x".join(map(str, shape)) + f"@{fraction:g}"


def read_plan(plan_file: Path | None, shape: tuple[int, int, int],
              fraction: float) -> dict | None:
    """The plan an earlier process stored for ``shape`` at ``fraction``, or None."""
    if plan_file is None or not plan_file.is_file():
        return None
    try:
        plan = json.loads(plan_file.read_text()).get(_plan_key(shape, fraction))
    except (OSError, ValueError):
        return None
    return None if plan is None else {**plan, "from_plan_file": True}


def write_plan(plan_file: Path | None, shape: tuple[int, int, int], fraction: float,
               plan: dict) -> None:
    """Add ``plan`` to ``plan_file`` (a JSON object, replaced atomically)."""
    if plan_file is None:
        return
    try:
        plans = json.loads(plan_file.read_text()) if plan_file.is_file() else {}
    except (OSError, ValueError):
        plans = {}
    plans[_plan_key(shape, fraction)] = plan
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = plan_file.with_name(f".{plan_file.name}.{os.getpid()}")
    tmp.write_text(json.dumps(plans, indent=1) + "\n")
    os.replace(tmp, plan_file)


class SideStreamPath(WrappedPath):
    """Runs ``inner`` on its own CUDA stream and never makes the caller's stream wait."""

    def __init__(self, inner: GemmPath) -> None:
        super().__init__(inner)
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def run(self, prepared, A, out):
        if prepared.device.type != "cuda":
            return self.inner.run(prepared, A, out)
        side = self._streams.get(prepared.device)
        if side is None:
            side = self._streams[prepared.device] = torch.cuda.Stream(prepared.device)
        side.wait_stream(torch.cuda.current_stream(prepared.device))   # inputs are ready
        with torch.cuda.stream(side):
            self.inner.run(prepared, A, out)
        return out                 # the defect: no current_stream().wait_stream(side)


#: Faults for ``FaultPath``: what a misbehaving call does.
FAULTS = ("raise", "oom", "rc", "nan", "inf", "skip_last_n_tile")


class FaultPath(WrappedPath):
    """``inner`` with ``fault`` injected where ``when`` says (default: every call).

    ``where="run"``: ``when(M, i)``, i counting this wrapper's run calls per M from 0 (0 is
    the runner's accuracy run, then the timing calls, then the fresh-input re-check).
    ``where="prepare"`` (raise/oom/rc only): ``when(K, N)`` of the weight being prepared.
    """

    def __init__(self, inner: GemmPath, fault: str, when: Callable[[int, int], bool] | None = None,
                 where: str = "run") -> None:
        super().__init__(inner)
        if fault not in FAULTS:
            raise ValueError(f"fault: {fault!r} is not one of {', '.join(FAULTS)}")
        if where not in ("run", "prepare"):
            raise ValueError(f"where: {where!r} is not 'run' or 'prepare'")
        self.fault, self.where = fault, where
        self.when = when or (lambda M, i: True)
        self.calls: dict[int, int] = {}

    def _raise(self, M: int) -> None:
        if self.fault == "oom":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB "
                                              f"(planted for M={M})")
        if self.fault == "rc":
            raise KernelReturnCode(self.name, 2, "planted: no kernel for this configuration")
        raise RuntimeError(f"planted kernel failure for M={M}")

    def prepare(self, weight, device):
        if self.where == "prepare" and self.fault in ("raise", "oom", "rc") \
                and self.when(weight.K, weight.N):
            self._raise(-1)
        return self.inner.prepare(weight, device)

    def run(self, prepared, A, out):
        M = int(A.shape[0])
        i = self.calls.get(M, 0)
        self.calls[M] = i + 1
        if self.where != "run" or not self.when(M, i):
            return self.inner.run(prepared, A, out)
        if self.fault in ("raise", "oom", "rc"):
            self._raise(M)
        if self.fault == "skip_last_n_tile":
            full = torch.empty_like(out)
            self.inner.run(prepared, A, full)
            out[:, :-128].copy_(full[:, :-128])   # the last 128 columns are never written
            return out
        self.inner.run(prepared, A, out)
        out[0, 0] = float("nan") if self.fault == "nan" else float("inf")
        return out
