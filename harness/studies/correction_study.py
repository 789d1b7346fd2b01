"""Correction-variant study: every variant of ``marlin_asym``'s correction, side by side.

    harness study correction --out DIR [--matrix production]
        [--filter EXPR] [--variants a,b] [--modes cold,graph] [--budget-s 170] [--quick]

One command: builds the extension, runs a crash-isolated sanity pass of every variant in a
subprocess (a variant that raises there is left out of the main run), then for each case
Marlin accepts (M >= 1, K % 128 == 0, N % 128 == 0 and N % 256 == 0 when M > 16, group
size 128 or K) it
  1. checks each variant on NaN-poisoned outputs, on the case's activations and on fresh
     random ones: every element written, the result bitwise repeatable, and the
     correction's contribution within ``ULP_BUDGET`` fp16 ULPs of exact arithmetic, i.e.
     |out - (C_marlin + a_sum64 @ delta64)| in ULPs of max(|exact|, |C_marlin|, |corr|)
     (the scale an fp32 sum rounded to fp16 is bounded by; the parity chain's measure),
     C_marlin being Marlin's own output on the same inputs; plus rel_err vs reference_fp64;
  2. times Marlin alone (before and after the variants; their mean is the baseline, the
     second one is kept as ``marlin_us_end`` to show drift), each variant, Marlin + an
     empty kernel (plain and PDL: the floor of a one-kernel correction) and Marlin + one
     kernel reading and writing C back unchanged (``rmw``: the floor of any correction
     after an unmodified Marlin) in eager ("cold") and CUDA-graph modes with
     ``harness.measure.timing`` over rotated operand copies (``harness.measure.rotation``,
     > 3 x L2), the same R calls per batch for all;
  3. derives overhead = variant / Marlin - 1 and the floor ratio = overhead_us / the
     empty kernel's own per-call time in that mode.
Writes DIR/correction_study.{csv,md,json} and DIR/log.txt; prints the per-variant summary,
the fastest correct variant per shape class (decode M <= 16, mid 17..256, large >= 257),
the ``AUTO_BY_CLASS`` line to paste into ``harness.kernels.marlin.variants``, and the
issue's targets evaluated on that choice. Exit 0 when it measured, 2 when it could not.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from harness.cases import MATRICES
from harness.cases.data import QuantizedWeight, quantize_asymmetric
from harness.kernels.build import BuildError, build_info, extension
from harness.kernels.marlin.variants import (
    FLOORS,
    STUDIED,
    UNCORRECTED,
    check_extension_names,
    check_variant_name,
)
from harness.kernels.reference import a_group_sum, reference_fp64
from harness.measure.envinfo import environment
from harness.measure.rotation import Operands

from .correction_bench import (  # noqa: F401  (re-exported: tests and callers use these)
    Study,
    _acts_array,
    _result,
    _weight_arrays,
    correction_ulps,
    fp16_ulp,
    marlin_accepts,
    torch_max3,
)
from .correction_report import (  # noqa: F401  (re-exported: the study's public helpers)
    COLUMNS,
    FLOOR_TARGETS,
    RANK_MODES,
    TARGETS,
    ULP_BUDGET,
    auto_line,
    evaluate_targets,
    floor_excess,
    floor_targets,
    fmt,
    marlin_failures,
    recommend,
    render_markdown,
    rmw_excess_lines,
    rmw_floor,
    rmw_floor_lines,
    shipped_picks,
    summarize,
    write_outputs,
)
from .correction_rmw import rmw_class_lines

T0 = time.monotonic()


# ----------------------------------------------------------------------------- sanity pass
#: (M, N, K, group size): every tile configuration (RG 1/4/8, RM 1/2/4), per-row and g128,
#: several column tiles per block (M100 N8192), > 48 KB of shared memory (M64 K8192 g128),
#: Marlin's split into 64-row problems with padding (M100, M130).
SANITY_SHAPES = ((1, 256, 1024, 128), (3, 512, 2048, 2048), (8, 768, 1024, 128),
                 (13, 256, 4096, 128), (16, 512, 1024, 1024), (40, 768, 2048, 128),
                 (64, 512, 8192, 128), (100, 8192, 2048, 128), (130, 512, 8192, 8192))


def run_sanity(args) -> int:
    """Child process: every variant on small shapes, eager and captured; JSON after each."""
    study = Study(args, print)
    dev = study.dev
    report: dict[str, dict] = {}
    path_json = Path(args.sanity_json)
    gen = torch.Generator(device=dev).manual_seed(1234)
    for v in args.variants:
        report[v] = {"started": True}
        path_json.write_text(json.dumps(report))
        worst, err, capture_err = 0.0, None, None
        try:
            for M, N, K, gs in SANITY_SHAPES:
                w = quantize_asymmetric(torch.randn(K, N, device=dev, generator=gen) * 0.02, gs)
                prepared = study.path.prepare(w, dev)
                A = torch.randn(M, K, device=dev, generator=gen).half()
                mo = torch.full((M, N), float("nan"), dtype=torch.float16, device=dev)
                study.path.run_marlin_only(prepared, A, mo)
                pack = prepared.state["pack"]
                corr = a_group_sum(A, pack.group_size) @ pack.delta.double()
                r = study.check(prepared, A, v, mo, corr, reference_fp64(A, w))
                if v not in UNCORRECTED:
                    worst = max(worst, r["max_corr_ulp"])
                if r["nonfinite"] or not r["deterministic"]:
                    err = err or f"M{M} N{N} K{K} g{gs}: {r}"
        except Exception as exc:
            err = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        if err is None:                        # captured into a CUDA graph and replayed
            try:
                out = torch.full((M, N), float("nan"), dtype=torch.float16, device=dev)
                call = study.step_for(Operands([prepared], [A], [out]), v)
                call(0)                        # outside the capture first (scratch, graphs)
                study.sync()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    call(0)
                out.fill_(float("nan"))
                g.replay()
                study.sync()
                if not bool(torch.isfinite(out).all()):
                    capture_err = "graph replay left unwritten elements"
            except Exception as exc:
                capture_err = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        report[v] = {"started": True, "done": True, "error": err, "capture_error": capture_err,
                     "max_corr_ulp": worst}
        path_json.write_text(json.dumps(report))
        try:
            study.sync()
        except Exception:      # a sticky CUDA error: the parent reruns the rest in a fresh child
            sys.stdout.flush()
            os._exit(3)
    return 0


def sanity_pass(args, out: Path, log) -> dict[str, str]:
    """Run the sanity child until every variant has a verdict; {variant: error} for failures."""
    todo, failed, verdicts = list(args.variants), {}, {}
    while todo:
        js = out / f"sanity-{len(verdicts)}.json"
        cmd = [sys.executable, "-m", "harness", "study", "correction", "--out", str(out),
               "--sanity-json", str(js), "--variants", ",".join(todo)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=args.sanity_timeout_s)
            tail = (proc.stdout + proc.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            tail = f"timed out after {args.sanity_timeout_s} s"
        rep = json.loads(js.read_text()) if js.is_file() else {}
        for v in todo:
            r = rep.get(v)
            if r and r.get("done"):
                verdicts[v] = r
                if r.get("error"):
                    failed[v] = r["error"]
            elif r and r.get("started"):
                last = " | ".join(tail.strip().splitlines()[-3:])
                verdicts[v] = {"error": f"sanity child died in this variant: {last}"}
                failed[v] = verdicts[v]["error"]
        left = [v for v in todo if v not in verdicts]
        if len(left) == len(todo):        # the child failed before any variant: inconclusive
            log("sanity pass inconclusive (the child failed before testing a variant); measuring "
                "every variant anyway. Its output ends: "
                + " | ".join(tail.strip().splitlines()[-3:]))
            break
        todo = left
    failed.pop("marlin_only", None)       # the baseline is always measured
    for v in args.variants:
        r = verdicts.get(v, {})
        verdict = f"FAIL: {failed[v]}" if v in failed else ("ok" if v in verdicts else "untested")
        log(f"sanity {v:16s} {verdict}"
            + (f" (max corr ULP {r['max_corr_ulp']:.2f})"
               if r.get("max_corr_ulp") is not None else "")
            + (f"; graph capture FAILED: {r['capture_error']}" if r.get("capture_error") else ""))
    return failed


# ----------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="harness study correction", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--matrix", default="production")
    p.add_argument("--filter", default=None, help="case filter expression (see `harness cases`)")
    p.add_argument("--variants", default=",".join(v for v in STUDIED if v != "marlin_only"))
    p.add_argument("--modes", default="cold,graph")
    p.add_argument("--rank-modes", default=",".join(RANK_MODES),
                   help="modes the recommendation ranks by (default: graph, the gating mode; "
                        "'cold,graph' ranks by their mean)")
    p.add_argument("--budget-s", type=float, default=170.0,
                   help="stop starting cases after this wall time")
    p.add_argument("--max-copies", type=int, default=256)
    p.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    p.add_argument("--no-sanity", action="store_true", help="skip the crash-isolated sanity pass")
    p.add_argument("--sanity-timeout-s", type=float, default=120.0)
    p.add_argument("--sanity-json", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.variants = [check_variant_name(v.strip(), "--variants")
                  for v in a.variants.split(",") if v.strip()]
    if not a.sanity_json:
        a.variants = ["marlin_only"] + [v for v in a.variants if v != "marlin_only"]
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    a.rank_modes = tuple(m.strip() for m in a.rank_modes.split(",") if m.strip())
    for flag, modes in (("--modes", a.modes), ("--rank-modes", a.rank_modes)):
        for m in modes:
            if m not in ("cold", "graph"):
                p.error(f"{flag}: {m!r} is not cold or graph")
    return a


def main(argv=None) -> int:
    global T0
    T0 = time.monotonic()              # --budget-s counts from here
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sanity_json:
        return run_sanity(args)
    logf = open(out / "log.txt", "a", buffering=1)

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - T0:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")

    if torch.version.cuda is None or not torch.cuda.is_available():
        why = f"no CUDA GPU visible to torch {torch.__version__}: the study measures GPUs only"
        log(why)
        (out / "UNAVAILABLE.txt").write_text(why + "\n")
        return 2
    cases, skipped = [], []
    for c in MATRICES.cases(args.matrix, args.filter):
        (skipped if marlin_accepts(c) else cases).append(c)
    order = {m: i for i, m in enumerate((1, 16, 64, 256, 1024, 32, 128))}
    cases.sort(key=lambda c: (order.get(c.M, 99), c.M, c.N, c.K, c.group_size))
    log(f"{len(cases)} cases Marlin accepts in {args.matrix!r} ({len(skipped)} left out); "
        f"variants {args.variants}")
    shapes = sorted({(c.N, c.K, c.group_size, c.seed) for c in cases})
    pool, futures = None, {}
    try:
        pool = ProcessPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2) - 2)),
                                   mp_context=multiprocessing.get_context("spawn"))
        futures = {s: pool.submit(_weight_arrays, *s) for s in shapes}
        futures.update({c.id: pool.submit(_acts_array, c.M, c.K, c.seed) for c in cases})
    except Exception as exc:  # e.g. no /dev/shm: generate in this process instead
        log(f"data generation pool unavailable ({exc}); generating serially")
    try:
        ext = extension()
    except BuildError as exc:
        log(f"extension unavailable: {exc}")
        (out / "UNAVAILABLE.txt").write_text(str(exc) + "\n")
        return 2
    info = build_info()
    log(f"extension {'cached' if info.cached else 'built'} in {info.build_seconds:.1f} s; "
        f"marlin: {info.with_marlin}")
    if not ext.has_marlin():
        (out / "UNAVAILABLE.txt").write_text(f"Marlin not compiled in: {info.marlin_reason}\n")
        log(f"Marlin not compiled in: {info.marlin_reason}")
        return 2
    check_extension_names(ext.correction_variant_names())
    failed = {} if args.no_sanity else sanity_pass(args, out, log)
    variants = [v for v in args.variants if v not in failed]
    study = Study(args, log)
    study.floors = {m: study.empty_floor(m) for m in args.modes}
    log("empty kernel alone, per call: "
        + ", ".join(f"{m} {t:.2f} us" for m, t in study.floors.items())
        + f"; PDL supported: {ext.pdl_supported(study.dev.index)}")
    env = environment(study.dev)
    header = ["# Correction variants of marlin_asym", "",
              f"Device {env.get('gpu_name')} (SM {env.get('compute_capability')}), "
              f"driver {env.get('driver')}, "
              f"torch {env['torch']}, CUDA {env['cuda']}, quanto {env.get('quanto')}, "
              f"commit {env.get('commit')}, "
              f"{env['date']}.",
              f"Command: `harness study correction {' '.join(argv or sys.argv[1:])}`",
              "Empty kernel alone per call: "
              + ", ".join(f"{m} {t:.2f} µs" for m, t in study.floors.items())
              + f". Sanity failures (not measured): {failed or 'none'}. Stop rule: {study.rule}."]
    extra = {"environment": env, "build": info.__dict__, "floors_us": study.floors,
             "sanity_failed": failed,
             "skipped_cases": [c.id for c in skipped], "variants": variants}
    rows: list[dict] = []
    durations: list[float] = []
    for i, case in enumerate(cases):
        est = statistics.median(durations) if durations else 0.0
        if time.monotonic() - T0 + est > args.budget_s:
            log(f"budget of {args.budget_s:.0f} s reached: {len(cases) - i} cases not measured")
            extra["not_measured"] = [c.id for c in cases[i:]]
            break
        t_case = time.monotonic()
        key = (case.N, case.K, case.group_size, case.seed)
        try:
            q, s, z = _result(futures.get(key), _weight_arrays, *key)
            weight = QuantizedWeight(torch.from_numpy(q), torch.from_numpy(s), torch.from_numpy(z),
                                     case.group_size)
            A = torch.from_numpy(_result(futures.get(case.id), _acts_array, case.M, case.K,
                                         case.seed))
            new = study.measure_case(case, weight, A, variants)
        except Exception as exc:
            log(f"{case.id}: FAILED {type(exc).__name__}: {exc}")
            try:
                torch.cuda.synchronize()
            except Exception:
                log("the CUDA context is unusable: stopping; results so far are written")
                break
            continue
        rows += new
        durations.append(time.monotonic() - t_case)
        best = min((r for r in new if r.get("overhead_pct") is not None and r.get("correct")
                    and r["variant"] not in FLOORS),
                   key=lambda r: r["overhead_pct"], default=None)
        m = {r["mode"]: r["marlin_us"] for r in new if r["variant"] == "marlin_only"}
        log(f"{case.id:28s} marlin " + " / ".join(f"{fmt(m.get(k))}" for k in args.modes)
            + " us; best "
            + (f"{best['variant']} {best['mode']} {best['overhead_pct']:+.1f}%" if best else "-")
            + f" ({durations[-1]:.1f} s)")
        write_outputs(out, rows, extra, header, args.rank_modes)
    if pool is not None:
        pool.shutdown(cancel_futures=True)
    extra["pdl_fallbacks"] = int(ext.pdl_fallbacks())
    header.append("PDL launches refused by the driver and relaunched plainly: "
                  f"{extra['pdl_fallbacks']}.")
    summary, picks, targets = write_outputs(out, rows, extra, header, args.rank_modes)
    log("summary (variant, mode: median / max overhead %, median floor ratio, max corr ULP):")
    for s in summary:
        log(f"  {s['variant']:16s} {s['mode']:5s} {fmt(s['median_overhead_pct']):>7s} / "
            f"{fmt(s['max_overhead_pct']):>7s}  {fmt(s['median_floor_ratio'], '.2f'):>6s}  "
            f"{fmt(s['max_corr_ulp'], '.2f'):>6s}  errors {s['errors']} incorrect {s['incorrect']}")
    ranked = ", ".join(f"{c} -> {p['variant']} ({p['score_pct']:.1f}%)" for c, p in picks.items())
    log(f"Recommendation (ranked by {'+'.join(args.rank_modes)}): {ranked or 'none'}")
    log("paste into harness/kernels/marlin/variants.py: " + auto_line(picks))
    for name, ok, val in targets:
        log(f"  {'PASS' if ok else 'FAIL'} {name}: {val}")
    for line in rmw_floor_lines(rows) + rmw_class_lines(rows, shipped_picks(rows),
                                                        "the shipped default"):
        log(f"  {line}")
    log(f"wrote {out / 'correction_study.csv'}, .md, .json")
    return 0 if rows else 2

