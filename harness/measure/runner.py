"""The runner: cases x paths x modes -> ``ResultRow``s, written to disk one by one.

Per (case, path), in this order (nothing inside a timing but the path's ``run``):
 1. ``unavailable_reason(device)`` -> every mode's row ``unavailable`` with the reason.
 2. The dispatcher model's decision for the case (``dispatch_path``, ``fallback_reason``).
 3. ``prepare`` (load time: ``prepare_seconds``, ``extra_bytes``).
 4. Accuracy, once: the output is poisoned with NaN, the path runs once, the result is
    compared with ``reference_case`` (fp64; silu(A Wg) * (A Wu) for a SwiGLU pair, whose
    paths come from ``harness.kernels.swiglu_pair.paths_for_case``; ULPs in the output
    dtype). Non-finite output (an unwritten element, a NaN) is an ``error``.
 5. Timing per mode (``harness.measure.timing``) over rotated operand copies
    (``harness.measure.rotation``); for a path exposing ``run_marlin_only`` the Marlin-only
    time and the correction's overhead are timed the same way. Before the cold samples,
    one batch checks that no work outlives the timed stream (``escaped_work``: a kernel
    left on a side stream is an ``error``, not a fast row).
 6. A re-check on FRESH activations after timing (poisoned output again): a path that
    caches its output, or whose state the timing loop corrupted, is an ``error``.
 7. Roofline; a time below the datasheet floor -> ``rejected``.
A path that declines the case in ``prepare`` (``harness.kernels.base.UnsupportedCase``,
e.g. the fused-zero Marlin on a per-row weight) gives ``unavailable`` rows with its reason.
Everything path-specific is asked of the path (``GemmPath``: availability, shapes, error
bound, byte model, nondeterminism); every row records whether the path the dispatcher
chose runs Marlin (``dispatch_marlin``, from that path's ``is_marlin``).
Exceptions (``KernelReturnCode``, CUDA out-of-memory, anything else) make that (case,
path)'s rows (or that mode's row) ``error`` with the reason; memory is freed and the sweep
goes on. Rows go through ``writer.write`` (the store's append-and-fsync writer) as soon as
a (case, path) is done; keys in ``writer.done_keys`` are skipped (``--resume``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import torch
from tqdm import tqdm

from harness.cases.case import GemmCase
from harness.cases.data import case_data, generate_activations
from harness.config import Settings
from harness.kernels import dispatch, registry_load
from harness.kernels.base import PATHS, GemmPath, PathRegistry, UnsupportedCase
from harness.kernels.swiglu_pair import case_weights, paths_for_case, reference_case
from harness.results.schema import ResultRow

from .ceilings import Ceilings, l2_cache_bytes
from .checks import (
    CheckFailed,
    _accuracy_fields,
    _free,
    _nonfinite_message,
    _run_poisoned,
    _sync_quietly,
    _with_timing,
    describe_error,
    ulp_dtype,
)
from .envinfo import sm_clock_reader
from .escape import escaped_work, event_tail_batch
from .reruns import accuracy_over_runs
from .roofline import Peaks, bytes_moved, datasheet_peaks, roofline
from .rotation import build_operands, plan_copies, prepared_nbytes
from .timing import StopRule, TimingResult, batch_calls, make_timer, time_batches

#: Seed offset of the fresh activations used for the post-timing re-check.
FRESH_SEED_OFFSET = 7919
#: The per-element ULP budget: each row's ``frac_ulp_over_budget`` is the fraction of output
#: elements more than this many ULPs (of the output dtype) from the fp64 reference. A fixed
#: constant, not a setting: the column is reported, never gated (the per-element ULP gate is
#: retired, ``harness.config.RETIRED``), and a fixed budget keeps it comparable across runs.
ULP_BUDGET = 2.0




@dataclass
class RunContext:
    """Everything a sweep needs besides the cases; built by the CLI (or a test)."""

    matrix: str
    device: torch.device
    settings: Settings
    modes: tuple[str, ...]
    commit: str = ""
    arch: str = ""
    device_name: str = ""
    gpu_index: int = -1            # the host's CUDA index of the device (-1: CPU)
    gpu_uuid: str = ""             # its uuid (a CPU stand-in of a sharded run: "cpu:<i>")
    ceilings: Ceilings | None = None
    registry: PathRegistry = field(default_factory=lambda: PATHS)
    dispatch_settings: dispatch.DispatchSettings | None = None   # None: env / API toggle
    max_copies: int = 1024
    mem_budget_bytes: int | None = None
    notes: dict[str, str] = field(default_factory=dict)   # "case|path|mode" -> note
    wall: dict[str, float] = field(default_factory=dict)  # host s by stage (Runner.wall)

    @property
    def measured(self) -> Peaks | None:
        return self.ceilings.peaks() if self.ceilings else None

    @property
    def maxima(self) -> Peaks | None:
        """Datasheet maxima for the impossible-time check (GPU only: CPU data sits in cache)."""
        if self.device.type != "cuda":
            return None
        return datasheet_peaks(self.device_name, self.measured)


# ----------------------------------------------------------------------------- helpers
def dispatch_decision(case: GemmCase, device: torch.device,
                      settings: dispatch.DispatchSettings | None = None,
                      registry: PathRegistry | None = None) -> tuple[str, str, bool | None]:
    """(dispatch_path, fallback_reason, dispatch_marlin) from ``harness.kernels.dispatch``:
    the path TinyLoop would run, why not Marlin, and whether that path runs Marlin (asked
    of the path, ``registry`` first; None when the model named no path)."""
    d = dispatch.decide_for_case(case, device, settings)
    name = str(d.path or "")
    marlin = registry_load.is_marlin(name, registry) if name else None
    return name, str(d.fallback_reason or ""), marlin


# ----------------------------------------------------------------------------- the runner
class Runner:
    """Runs a list of cases through paths and modes; see the module docstring."""

    def __init__(self, ctx: RunContext, writer=None, progress: bool = False,
                 skip: frozenset = frozenset()) -> None:
        self.ctx = ctx
        self.writer = writer
        self.skip = frozenset(skip)               # keys done elsewhere (a sharded run's resume)
        self.progress = progress
        self.rows: list[ResultRow] = []
        self._fresh = None
        self._weights: tuple = ()                 # the case's weights (fresh-input reference)
        self.rule = StopRule.from_settings(ctx.settings)
        #: each timing mode's stop rule (cold may take fewer samples: ``cold_min_samples``)
        self.rules = {m: StopRule.from_settings(ctx.settings, m) for m in ctx.modes}
        self.read_clock = sm_clock_reader(ctx.device)
        self.l2 = l2_cache_bytes(ctx.device)
        #: host seconds by stage (case data + reference, per-path set-up, each mode's
        #: timing, the fresh-input re-check): where a run's wall time goes
        self.wall: dict[str, float] = dict.fromkeys(("data", "set-up", *ctx.modes, "re-check"), 0.0)

    # -- bookkeeping -----------------------------------------------------------------
    def _done(self) -> frozenset:
        done = getattr(self.writer, "done_keys", frozenset()) if self.writer else frozenset()
        return frozenset(done) | self.skip

    def _emit(self, row: ResultRow) -> None:
        if self.writer is not None:
            self.writer.write(row)
        self.rows.append(row)

    def _base_row(self, case: GemmCase, path: GemmPath, mode: str) -> ResultRow:
        ctx = self.ctx
        try:
            impl = path.implementation(ctx.device)
        except Exception as exc:  # a broken implementation() must not stop the sweep
            impl = f"implementation() failed: {describe_error(exc)}"
        return ResultRow(
            matrix=ctx.matrix, case_id=case.id, path=path.name, mode=mode, M=case.M, N=case.N,
            K=case.K, group_size=case.group_size, seed=case.seed, kind=case.kind,
            tags=";".join(case.tags), role=path.role, implementation=impl, arch=ctx.arch,
            device_name=ctx.device_name, gpu_index=ctx.gpu_index, gpu_uuid=ctx.gpu_uuid,
            commit=ctx.commit,
        )

    def error_rows(self, case: GemmCase, path_names: Sequence[str] | None,
                   reason: str) -> list[ResultRow]:
        """An ``error`` row saying ``reason`` for every (path, mode) of ``case`` not done:
        what a sharded run records for a case whose workers died (nothing measured)."""
        paths = paths_for_case(case, self.ctx.registry.select(
            list(path_names) if path_names else None))
        done = self._done()
        return [replace(self._base_row(case, p, m), status="error", error=reason)
                for p in paths for m in self.ctx.modes if (case.id, p.name, m) not in done]

    def _note(self, case: GemmCase, path: str, mode: str, text: str) -> None:
        if text:
            key = f"{case.id}|{path}|{mode}"
            prev = self.ctx.notes.get(key)
            self.ctx.notes[key] = f"{prev}; {text}" if prev else text

    # -- the sweep -------------------------------------------------------------------
    def run(self, cases: Sequence[GemmCase],
            path_names: Sequence[str] | None = None) -> list[ResultRow]:
        """Measure every (case, path, mode) not already done; returns this call's rows."""
        paths = self.ctx.registry.select(list(path_names) if path_names else None)
        done = self._done()
        bar = None
        if self.progress:
            total = sum(len(paths_for_case(c, paths)) for c in cases)
            bar = tqdm(total=total, unit="case x path", dynamic_ncols=True,
                       mininterval=0.2 if sys.stderr.isatty() else 10.0)
        try:
            for case in cases:
                case_paths = paths_for_case(case, paths)      # a SwiGLU pair: pair paths
                todo = [p for p in case_paths
                        if any((case.id, p.name, m) not in done for m in self.ctx.modes)]
                if todo:
                    self._run_case(case, todo, done, bar)
                if bar is not None:
                    bar.update(len(case_paths) - len(todo))
        finally:
            if bar is not None:
                bar.close()
        return self.rows

    def _run_case(self, case: GemmCase, paths: list[GemmPath], done: frozenset, bar) -> None:
        device = self.ctx.device
        dispatch_path, fallback, marlin = dispatch_decision(case, device,
                                                            self.ctx.dispatch_settings,
                                                            self.ctx.registry)
        data = ref = None
        self._fresh = None                        # (A16, ref) on fresh inputs, per case
        for path in paths:
            modes = [m for m in self.ctx.modes if (case.id, path.name, m) not in done]
            if bar is not None:
                bar.set_postfix_str(f"{case.id} {path.name}", refresh=False)
            base = {m: replace(self._base_row(case, path, m), dispatch_path=dispatch_path,
                               dispatch_marlin=marlin, fallback_reason=fallback) for m in modes}
            reason = self._unavailable(case, path)
            if reason:
                for m in modes:
                    self._emit(replace(base[m], status="unavailable", error=reason))
            else:
                if data is None:
                    t0 = time.perf_counter()
                    data = case_data(case)
                    self._weights = data.weights
                    ref = reference_case(data.A.to(device), data.weights)
                    self.wall["data"] += time.perf_counter() - t0
                rows = self._measure_path(case, path, modes, base, data, ref)
                for row in rows:
                    self._emit(row)
                if any(r.status == "error" for r in rows):
                    _free(device)                 # after an OOM or a failed capture only
            if bar is not None:
                bar.update(1)

    def _unavailable(self, case: GemmCase, path: GemmPath) -> str | None:
        if case.kind not in getattr(path, "kinds", ("gemm",)):
            return f"case kind {case.kind!r} is not run by path {path.name!r}"
        try:
            return path.unavailable_reason(self.ctx.device) or path.unsupported_reason(case)
        except Exception as exc:
            return f"unavailable_reason() failed: {describe_error(exc)}"

    # -- one (case, path) ------------------------------------------------------------
    def _measure_path(self, case, path, modes, base, data, ref) -> list[ResultRow]:
        device = self.ctx.device
        t0 = time.perf_counter()
        try:
            prepared = path.prepare_timed(case_weights(data, device), device)
            load = {"prepare_seconds": prepared.prepare_seconds,
                    "extra_bytes": prepared.extra_bytes}
            base = {m: replace(r, **load) for m, r in base.items()}
            A = data.A.to(device=device, dtype=prepared.input_dtype)
            dtype = ulp_dtype(prepared.output_dtype)
            once = partial(_run_poisoned, path, prepared, A, case.M, case.N, device)
            repeats = self.ctx.settings.accuracy_runs
            runs = accuracy_over_runs(once, ref, repeats, ULP_BUDGET, dtype)
            acc = runs.modal                      # the most frequent of identical-input runs
            bound, why = path.error_bound(case)
            base = {m: replace(r, **_accuracy_fields(acc), **runs.row_fields(), rel_err_bound=bound,
                               nondeterminism_note=path.nondeterminism, rel_err_bound_reason=why)
                    for m, r in base.items()}
            if runs.worst.nonfinite:
                which = ("first run" if runs.worst_run == 1 else
                         f"run {runs.worst_run} of {runs.runs} on identical inputs")
                raise CheckFailed(_nonfinite_message(runs.worst, which))
            plan = self._plan(case, path, prepared)
            ops = build_operands(prepared, A, plan.copies)
        except Exception as exc:
            _free(device)
            status = "unavailable" if isinstance(exc, UnsupportedCase) else "error"
            return [replace(r, status=status, error=describe_error(exc)) for r in base.values()]
        finally:
            self.wall["set-up"] += time.perf_counter() - t0

        rows = []
        for m in modes:
            if plan.note and m != "cpu":
                self._note(case, path.name, m, plan.note)
            t0 = time.perf_counter()
            rows.append(self._time_mode(case, path, m, base[m], ops, plan))
            self.wall[m] += time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            said = self._fresh_check(case, path, ops.prepared[0], acc, base[modes[0]])
            for m in modes:
                self._note(case, path.name, m, said)
        except Exception as exc:
            why = "re-check on fresh inputs after timing: " + describe_error(exc)
            rows = [replace(r, status="error", error=why) if r.status == "ok" else r for r in rows]
        self.wall["re-check"] += time.perf_counter() - t0
        del ops, prepared
        return rows

    def _plan(self, case, path, prepared):
        if self.ctx.device.type != "cuda":
            return plan_copies(bytes_moved(path, case).total, 0)
        per_call = bytes_moved(path, case).total
        mem = prepared_nbytes(prepared) + case.M * (case.K + case.N) * 2
        return plan_copies(per_call, self.l2, max_copies=self.ctx.max_copies,
                           mem_budget_bytes=self.ctx.mem_budget_bytes, mem_per_copy=mem)

    def _calls(self, mode: str, step, copies: int) -> int:
        """R for this (case, path): a pilot of one eager batch over every copy."""
        pilot = make_timer("cpu" if mode == "cpu" else "cold", step, copies, self.ctx.device)
        pilot()                                   # warm (module load, first-call work)
        per_call = max(pilot(), 1e-3)
        return batch_calls(mode, per_call)

    def _timed(self, mode: str, step, calls: int, copies: int) -> TimingResult:
        timer = make_timer(mode, step, calls, self.ctx.device, span=copies,
                           idle_ratio=self.ctx.settings.graph_idle_ratio)
        try:
            clock = self.read_clock if mode != "cpu" else None
            return time_batches(timer, self.rules.get(mode, self.rule), clock,
                                calls_per_batch=calls, mode=mode)
        finally:
            close = getattr(timer, "close", None)
            if close:
                close()

    def _time_mode(self, case, path, mode, row, ops, plan) -> ResultRow:
        try:
            step = ops.step_fn(path.run)
            calls = self._calls(mode, step, ops.copies)
            if mode == "cold":
                why = escaped_work(event_tail_batch(step, calls, self.ctx.device))
                if why:
                    raise CheckFailed(why)
            res = self._timed(mode, step, calls, ops.copies)
            row = _with_timing(row, res)
            self._note(case, path.name, mode, f"{res.stop_reason} after {res.stats.n} samples "
                       f"of {calls} calls over {ops.copies} copies"
                       + (f"; {res.notes}" if res.notes else ""))
            marlin_only = getattr(path, "run_marlin_only", None)
            if marlin_only is not None and mode != "cpu":
                mres = self._timed(mode, ops.step_fn(marlin_only), calls, ops.copies)
                t_m = mres.stats.median
                row = replace(row, marlin_only_us=t_m,
                              correction_overhead_pct=(res.stats.median / t_m - 1.0) * 100.0)
        except Exception as exc:
            _sync_quietly(self.ctx.device)
            return replace(row, status="error", error=f"{mode} timing: {describe_error(exc)}")
        rl = roofline(case, path, row.time_us_median, self.ctx.measured, self.ctx.maxima,
                      l2_cold=plan.l2_cold)
        row = replace(row, tflops=rl.tflops, gbps=rl.gbps, bytes_moved=rl.bytes_moved,
                      roofline_floor_us=rl.floor_us, pct_roofline=rl.pct_roofline)
        if rl.rejected_reason:
            row = replace(row, status="rejected", error="impossible time (measurement error): "
                          + rl.rejected_reason)
        return row

    def _fresh_check(self, case, path, prepared, first, row: ResultRow) -> str:
        """Run the path once more on fresh activations (output poisoned first) and compare
        with the float64 reference: a path whose first reading passed the accuracy gate
        and whose fresh reading does not (or holds non-finite values) is an ERROR (cached
        output, unwritten elements). A first reading already over the gate is the gate's
        WORSE_ACCURACY whatever the fresh one reads: then this returns a note, never
        raises for accuracy."""
        device = self.ctx.device
        bound = self.ctx.settings.rel_err_gate
        if math.isfinite(row.rel_err_bound):
            bound = max(bound, row.rel_err_bound)
        first_failed = not (first.rel_err <= bound) or row.nonfinite > 0
        if self._fresh is None:
            A16 = generate_activations(case.M, case.K, case.seed + FRESH_SEED_OFFSET).to(device)
            self._fresh = (A16, reference_case(A16, self._weights))
        A16, ref = self._fresh
        out = _run_poisoned(path, prepared, A16.to(prepared.input_dtype), case.M, case.N, device)
        # On the device, in float64: only non-finite elements and rel_err are needed here.
        o = out.double()
        bad = int((~torch.isfinite(o)).sum())
        if bad and first_failed:
            return (f"fresh inputs: {bad} of {o.numel()} output elements non-finite too (the "
                    "first inputs' reading already fails the accuracy gate)")
        if bad:
            raise CheckFailed(f"fresh inputs: {bad} of {o.numel()} output elements are non-finite "
                              "(the output was NaN-poisoned before the run: unwritten or NaN)")
        den = float(ref.abs().mean())
        rel = float((o - ref).abs().mean()) / den if den else float((o - ref).abs().max())
        if first_failed:
            return (f"fresh inputs: rel_err {rel:.3g} (the first inputs' {first.rel_err:.3g} is "
                    f"already over the accuracy gate {bound:g})")
        limit = max(4.0 * first.rel_err, self.ctx.settings.rel_err_gate)
        if not rel <= limit:
            raise CheckFailed(f"rel_err {rel:.3g} on fresh inputs vs {first.rel_err:.3g} "
                              "on the first inputs (does the path cache its output?)")
        return ""
