"""The correction study's measurement state: one case, every variant, checked and timed.

``Study`` (device, extension, stop rule, the empty-kernel floors) measures one case in
``measure_case``: each variant checked on NaN-poisoned outputs against Marlin's own output
plus the exact correction (``correction_ulps``), then timed in each mode over rotated
operand copies next to Marlin alone. Driven by ``harness.studies.correction_study`` (the
command, the sanity pass, the output files); split from it to keep one idea per module.
"""

from __future__ import annotations

import math
import time

import torch

from harness.cases.data import case_weight, generate_activations
from harness.kernels.build import extension
from harness.kernels.marlin.asym import MarlinAsymPath
from harness.kernels.marlin.variants import UNCORRECTED, shape_class
from harness.kernels.reference import a_group_sum, reference_fp64
from harness.measure.ceilings import l2_cache_bytes
from harness.measure.envinfo import sm_clock_reader
from harness.measure.roofline import bytes_moved
from harness.measure.rotation import build_operands, plan_copies, prepared_nbytes
from harness.measure.runner import FRESH_SEED_OFFSET
from harness.measure.timing import StopRule, batch_calls, make_timer, time_batches

from .correction_report import ULP_BUDGET


# ----------------------------------------------------------------------------- pure helpers
def fp16_ulp(x):
    """ULP of fp16 at |x| (torch float64, elementwise): harness.measure.accuracy.ulp_size."""
    x = x.abs()
    _, e = torch.frexp(x)
    ulp = torch.ldexp(torch.ones_like(x), (e - 11).to(x.dtype))
    return torch.clamp(torch.where(x == 0, torch.zeros_like(x), ulp), min=2.0 ** -24)


def correction_ulps(out, marlin_out, corr_ref):
    """|out - (C_marlin + corr)| in fp16 ULPs of max(|exact|, |C_marlin|, |corr|) (float64)."""
    exact = marlin_out.double() + corr_ref
    scale = torch_max3(exact.abs(), marlin_out.double().abs(), corr_ref.abs())
    return (out.double() - exact).abs() / fp16_ulp(scale)


def torch_max3(a, b, c):
    return torch.maximum(torch.maximum(a, b), c)


def marlin_accepts(case) -> str | None:
    """None when Marlin takes ``case``; else why not (the study measures Marlin's shapes only)."""
    if case.kind != "gemm":
        return f"kind {case.kind!r}"
    if case.K % 128 or case.N % 128 or (case.M > 16 and case.N % 256):
        return "K % 128, N % 128 or (M > 16) N % 256"
    if case.group_size not in (128, case.K):
        return f"group size {case.group_size} (Marlin: 128 or per-row)"
    return None


def _weight_arrays(N, K, gs, seed):
    w = case_weight(N, K, gs, seed)
    return w.q.numpy(), w.scale.numpy(), w.zero.numpy()


def _result(future, fn, *args):
    """The pool's result, or ``fn(*args)`` here when there is no pool or it failed."""
    if future is not None:
        try:
            return future.result()
        except Exception:
            pass
    return fn(*args)


def _acts_array(M, K, seed):
    return generate_activations(M, K, seed).numpy()


class Study:
    """The measurement state of one run (device, extension, settings, output)."""

    def __init__(self, args, log):
        self.args, self.log, self.torch = args, log, torch
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.ext = extension()
        self.path = MarlinAsymPath(variant="two_kernel")
        q = args.quick
        self.rule = StopRule(warmup_ms=5.0 if q else 10.0, max_case_seconds=0.1 if q else 0.2,
                             target_rel_spread=0.01, min_samples=5 if q else 8,
                             max_samples=20 if q else 30)
        self.read_clock = sm_clock_reader(self.dev)
        self.floors: dict[str, float] = {}

    def sync(self):
        self.torch.cuda.synchronize(self.dev)

    def step_for(self, ops, variant):
        path = self.path
        if variant == "marlin_only":
            return ops.step_fn(path.run_marlin_only)
        return ops.step_fn(lambda p, a, o, _v=variant: path.run_variant(p, a, o, _v))

    def timed(self, mode, step, calls, copies=None):
        timer = make_timer(mode, step, calls, self.dev, span=copies)
        try:
            return time_batches(timer, self.rule, self.read_clock, calls_per_batch=calls, mode=mode)
        finally:
            if hasattr(timer, "close"):
                timer.close()

    def host_us(self, step, calls):
        n = min(calls, 256)
        self.sync()
        t = time.perf_counter()
        for i in range(n):
            step(i)
        t = (time.perf_counter() - t) / n * 1e6
        self.sync()
        return t

    def empty_floor(self, mode):
        idx = self.dev.index
        res = self.timed(mode, lambda i: self.ext.launch_empty(idx, False), 1000)
        return res.stats.median

    def check(self, prepared, A, variant, marlin_out, corr_ref, ref_full):
        outs = []
        for _ in range(2):
            o = torch.full_like(marlin_out, float("nan"))
            if variant == "marlin_only":
                self.path.run_marlin_only(prepared, A, o)
            else:
                self.path.run_variant(prepared, A, o, variant)
            outs.append(o)
        self.sync()
        o = outs[0].double()
        ulps = correction_ulps(outs[0], marlin_out, corr_ref)
        finite = torch.isfinite(ulps)
        res = {"nonfinite": int((~torch.isfinite(o)).sum()),
               "deterministic": bool(torch.equal(outs[0], outs[1])),
               "max_corr_ulp": float(ulps[finite].max()) if bool(finite.any()) else math.inf,
               "p99_corr_ulp": float(torch.quantile(ulps[finite].flatten()[:1 << 24].float(), 0.99))
               if bool(finite.any()) else math.inf,
               "rel_err": float((o - ref_full).abs().mean() / ref_full.abs().mean())}
        if res["nonfinite"]:
            res["max_corr_ulp"] = math.inf
        return res

    def measure_case(self, case, weight, A_cpu, variants) -> list[dict]:
        dev = self.dev
        base = {"case_id": case.id, "M": case.M, "N": case.N, "K": case.K,
                "group_size": case.group_size, "shape_class": shape_class(case.M)}
        w = weight.to(dev)
        prepared = self.path.prepare(w, dev)
        delta64 = prepared.state["pack"].delta.double()
        checks: dict[str, dict] = {v: {} for v in variants}
        gen = torch.Generator(device=dev).manual_seed(case.seed + FRESH_SEED_OFFSET)
        A = A_cpu.to(dev)
        for A_k in (A, torch.randn(case.M, case.K, device=dev, generator=gen).half()):
            marlin_out = torch.full((case.M, case.N), float("nan"), dtype=torch.float16, device=dev)
            self.path.run_marlin_only(prepared, A_k, marlin_out)
            corr = a_group_sum(A_k, prepared.state["pack"].group_size) @ delta64
            ref_full = reference_fp64(A_k, w)
            for v in variants:
                if checks[v].get("error"):
                    continue
                try:
                    r = self.check(prepared, A_k, v, marlin_out, corr, ref_full)
                except Exception as exc:  # recorded; the variant is not timed on this case
                    self.sync()
                    why = " ".join(str(exc).split())[:240]
                    checks[v] = {"error": f"{type(exc).__name__}: {why}"}
                    continue
                old = checks[v]
                checks[v] = {k: (max(old[k], r[k]) if k in old and k != "deterministic" else r[k])
                             for k in r}
                checks[v]["deterministic"] = r["deterministic"] and old.get("deterministic", True)
        for v, c in checks.items():
            if "error" in c:
                continue
            if v in UNCORRECTED:                # no correction: written, repeatable
                c["correct"] = c["nonfinite"] == 0 and c["deterministic"]
                c["max_corr_ulp"] = c["p99_corr_ulp"] = None
            else:
                c["correct"] = (c["nonfinite"] == 0 and c["deterministic"]
                                and c["max_corr_ulp"] <= ULP_BUDGET)
        per_call = bytes_moved(self.path, case).total
        mem = prepared_nbytes(prepared) + case.M * (case.K + case.N) * 2
        plan = plan_copies(per_call, l2_cache_bytes(dev), max_copies=self.args.max_copies,
                           mem_per_copy=mem)
        ops = build_operands(prepared, A, plan.copies)
        pilot = make_timer("cold" if dev.type == "cuda" else "cpu",
                           self.step_for(ops, "marlin_only"), ops.copies, dev)
        pilot()
        per = max(pilot(), 1e-3)
        rows = []
        for mode in self.args.modes:
            calls = batch_calls(mode, per)
            times: dict[str, object] = {}
            order = ["marlin_only"] + [v for v in variants if v != "marlin_only"] + ["marlin_end"]
            for v in order:
                name = "marlin_only" if v == "marlin_end" else v
                if checks.get(name, {}).get("error"):
                    continue
                try:
                    step = self.step_for(ops, name)
                    times[v] = (self.timed(mode, step, calls, ops.copies),
                                self.host_us(step, calls) if mode == "cold" else None)
                except Exception as exc:
                    self.sync()
                    why = " ".join(str(exc).split())[:200]
                    checks[name] = {"error": f"{mode} timing: {type(exc).__name__}: {why}"}
            ends = [times[k][0].stats.median for k in ("marlin_only", "marlin_end") if k in times]
            t_m = sum(ends) / len(ends) if ends else None      # Marlin bracketing the variants
            floor = self.floors.get(mode)
            for v in variants:
                c = checks[v]
                row = {**base, "variant": v, "mode": mode, "calls": calls, "copies": ops.copies,
                       "l2_cold": plan.l2_cold, "marlin_us": t_m,
                       "marlin_us_end": ends[-1] if len(ends) == 2 else None, "floor_us": floor,
                       **{k: c.get(k) for k in ("correct", "max_corr_ulp", "p99_corr_ulp",
                                                "nonfinite", "rel_err", "deterministic",
                                                "error")}}
                if v not in times:
                    row["status"] = "error"
                    rows.append(row)
                    continue
                res, host = times[v]
                s = res.stats
                row.update(status="ok" if c.get("correct") else "incorrect", time_us=s.median,
                           iqr_us=s.iqr, ci_lo_us=s.ci_lo, ci_hi_us=s.ci_hi, n_samples=s.n,
                           stop_reason=res.stop_reason,
                           host_us=host)
                if t_m and v != "marlin_only":
                    row["overhead_us"] = s.median - t_m
                    row["overhead_pct"] = (s.median / t_m - 1.0) * 100.0
                    if floor:
                        row["floor_ratio"] = row["overhead_us"] / floor
                rows.append(row)
        for r in rows:  # the same shape's empty-kernel overhead: the marginal launch floor
            # (never rmw's, which is a floor row of its own: its ratio here is over empty's)
            ref = next((x for x in rows if x["mode"] == r["mode"] and x["variant"] ==
                        ("empty_pdl" if r["variant"].endswith("_pdl") else "empty")), None)
            marg = ref.get("overhead_us") if ref else None
            if r.get("overhead_us") is not None and marg is not None and marg > 0.05:
                r["marginal_floor_ratio"] = r["overhead_us"] / marg
        del ops, prepared
        self.ext.graph_cache_clear()
        torch.cuda.empty_cache()
        return rows
