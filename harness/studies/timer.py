"""Why do graph-mode rows at large M read above the profiler, and marlin_asym cold rows
above a plain loop? One GPU process, several ways of timing the same (case, path).

For each (case, path):
  graph      the harness's graph timer (R calls per graph over P rotated copies), median
  graph_prof the same graphs replayed under torch.profiler: per call, the summed kernel
             time, the busy union, the first-to-last kernel span; the kernel names
  graph1     one call per graph (R graphs replayed back to back in one batch), median
  graph_idleX the harness's graphs with X times the batch time idle after each batch
  cold       the harness's eager timer, median; cold_prof its busy union under the profiler
  loop_same  a plain loop of path.run on ONE copy between two events (L2 warm)
  loop_rot   a plain loop over the rotated copies between two events (no spin)
  clocks     SM clock and power (NVML) sampled during 0.5 s of graph replays and of eager
             batches
  realloc    the graph median again after freeing and re-allocating the copies

    harness study timer --filter "M == 1024" --paths fp16_cache --out diag.json
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import torch

from harness.measure.envinfo import nvml_device
from harness.measure.single import setup_timing

from .crosscheck import busy_us, profiled_spans
from .study_cli import case_path_parser, case_paths

IDLE_RATIOS = (1.0, 3.0)


def _median_of(fn, n: int) -> float:
    fn()
    return statistics.median(fn() for _ in range(n))


def _span_stats(spans, calls: int) -> dict:
    if not spans:
        return {"kernels": 0}
    total = sum(d for _, _, d in spans)
    first = min(s for _, s, _ in spans)
    last = max(s + d for _, s, d in spans)
    names: dict[str, int] = {}
    for n, _, _ in spans:
        names[n[:90]] = names.get(n[:90], 0) + 1
    return {"kernels_per_call": len(spans) / calls, "sum_us": total / calls,
            "busy_us": busy_us(spans) / calls, "span_us": (last - first) / calls,
            "names": names}


def _nvml_sampler(device: torch.device):
    """``sample(fn, seconds)``: SM clock and power polled while ``fn`` runs; None without NVML."""
    try:
        nv, h = nvml_device(device)
    except RuntimeError as exc:
        print(f"timer: no clock samples ({exc})")
        return None

    def sample(fn, seconds: float) -> dict:
        stop = threading.Event()
        clocks, power = [], []

        def poll():
            while not stop.is_set():
                clocks.append(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                power.append(nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
                time.sleep(0.01)

        t = threading.Thread(target=poll)
        t.start()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn()
        stop.set()
        t.join()
        try:
            reasons = int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        except Exception:
            reasons = -1
        return {"sm_mhz_median": statistics.median(clocks) if clocks else None,
                "sm_mhz_min": min(clocks) if clocks else None,
                "power_w_median": statistics.median(power) if power else None,
                "throttle_reasons": reasons}

    return sample


def _loop(step, idx, reps: int = 30) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    vals = []
    for _ in range(reps):
        start.record()
        for i in idx:
            step(i)
        end.record()
        torch.cuda.synchronize()
        vals.append(start.elapsed_time(end) * 1e3 / len(idx))
    return statistics.median(vals[2:])


def one(case, path, device, sampler, reps: int) -> dict:
    out: dict = {"case": case.id, "path": path.name}
    g = setup_timing(case, path, device, "graph")
    out.update(R=g.calls, copies=g.operands.copies)
    out["graph"] = _median_of(g.batch, reps)
    for ratio in IDLE_RATIOS:             # the same graphs at a bounded duty cycle
        g.timer.idle_ratio = ratio
        out[f"graph_idle{ratio:g}"] = _median_of(g.batch, reps)
        if sampler:
            out[f"graph_idle{ratio:g}_clock"] = sampler(g.batch, 0.5)
    g.timer.idle_ratio = 0.0
    spans = profiled_spans(g.batch, 10)
    out["graph_prof"] = _span_stats(spans, 10 * g.calls)
    if sampler:
        out["graph_clock"] = sampler(g.batch, 0.5)
    step = g.operands.step_fn(path.run)
    # one call per graph
    graphs = []
    for i in range(g.calls):
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            step(i)
        graphs.append(gr)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def batch1() -> float:
        s.record()
        for gr in graphs:
            gr.replay()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1e3 / len(graphs)

    out["graph1"] = _median_of(batch1, reps)
    out["graph1_prof"] = _span_stats(profiled_spans(batch1, 10), 10 * len(graphs))
    for gr in graphs:
        gr.reset()
    graphs.clear()
    g.close()
    c = setup_timing(case, path, device, "cold")
    out["cold"] = _median_of(c.batch, reps)
    cspans = profiled_spans(c.batch, 10)
    out["cold_prof"] = _span_stats(cspans, 10 * c.calls)
    if sampler:
        out["cold_clock"] = sampler(c.batch, 0.5)
    cstep = c.operands.step_fn(path.run)
    out["loop_same"] = _loop(cstep, [0] * c.calls)
    out["loop_rot"] = _loop(cstep, list(range(c.calls)))
    marlin_only = getattr(path, "run_marlin_only", None)
    if marlin_only is not None:
        mstep = c.operands.step_fn(marlin_only)
        out["marlin_loop_same"] = _loop(mstep, [0] * c.calls)
        out["marlin_loop_rot"] = _loop(mstep, list(range(c.calls)))
        stats = torch.cuda.memory_stats()
        a0 = stats.get("allocation.all.allocated", 0)
        c.batch()
        allocated = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        out["allocs_per_cold_batch"] = allocated - a0
    c.close()
    del c
    torch.cuda.empty_cache()
    g2 = setup_timing(case, path, device, "graph")
    out["graph_realloc"] = _median_of(g2.batch, reps)
    g2.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = case_path_parser("harness study timer", __doc__, paths="fp16_cache")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("timer: no CUDA GPU is visible; nothing to time")
        return 0
    device = torch.device("cuda", torch.cuda.current_device())
    sampler = _nvml_sampler(device)
    results = []
    cols = ("graph", "graph_idle1", "graph_idle3", "cold", "loop_same", "graph_realloc")
    print(f"{'case':26s} {'path':12s} R  P " + " ".join(f"{c:>9s}" for c in cols)
          + "  g.sum g.span c.busy  clk(g/c)", flush=True)
    for case, path in case_paths(args, device):
        try:
            r = one(case, path, device, sampler, args.reps)
        except Exception as exc:  # keep going: one failing row must not lose the others
            print(f"{case.id} {path.name}: {type(exc).__name__}: {exc}"[:200], flush=True)
            continue
        results.append(r)
        gp, cp = r["graph_prof"], r["cold_prof"]
        clk = "/".join(str(r.get(k, {}).get("sm_mhz_median")) for k in
                       ("graph_clock", "graph_idle1_clock", "graph_idle3_clock", "cold_clock"))
        print(f"{r['case']:26s} {r['path']:12s} {r['R']:2d} {r['copies']:2d} "
              + " ".join(f"{r[c]:9.2f}" for c in cols)
              + f"  {gp.get('sum_us', 0):6.2f} {gp.get('span_us', 0):6.2f} "
              f"{cp.get('busy_us', 0):6.2f}  {clk}",
              flush=True)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(results, fh, indent=1)
    return 0

