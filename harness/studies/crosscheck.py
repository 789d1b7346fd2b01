"""Cross-check the harness's timings against an independent timer: torch.profiler (CUPTI).

For each (case, path): the harness's ``cold`` and ``graph`` medians (CUDA events), then a
few more cold batches under ``torch.profiler``. From the exported trace, the device
activity (kernels, memsets, memcpys) is merged into busy intervals and the busy time is
divided by the number of calls. Two things are left out or handled on purpose: the eager
timer's own spin kernel (``torch.cuda._sleep``, launched before each batch so the host runs
ahead; it is not the path's work) is dropped, and kernels that overlap in time (a path
that runs work on a second stream, e.g. ``marlin_asym``'s side_stream correction) count
once, as the union of their intervals, not as the sum of their durations. When the GPU is
the bottleneck (no idle gaps between launches) the cold median and the busy time agree;
where the cold median is higher, the difference is launch gaps (graph mode removes most of
them).

    harness study crosscheck --matrix production \
        --filter "M == 1024 and N == 8192" --paths fp16_cache,marlin_asym
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from harness.config import load_settings
from harness.measure.single import setup_timing
from harness.measure.timing import StopRule, time_batches

from .study_cli import case_path_parser, run_each

DEVICE_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


@dataclass(frozen=True)
class CrossCheck:
    case_id: str
    path: str
    cold_us: float
    graph_us: float
    profiler_us: float          # device busy time per call under torch.profiler (union of spans)
    kernels_per_call: float
    calls: int
    #: (device activity name, us per call) summed by name, longest first: what the call's
    #: time is made of (e.g. Marlin vs the correction's kernels)
    by_name: tuple[tuple[str, float], ...] = ()

    @property
    def cold_vs_profiler(self) -> float:
        return self.cold_us / self.profiler_us - 1.0

    @property
    def graph_vs_profiler(self) -> float:
        return self.graph_us / self.profiler_us - 1.0


#: device activity that is the timer's, not the path's: torch.cuda._sleep's kernel
TIMER_KERNELS = ("spin_kernel",)


def device_spans(trace_path: str) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of every device activity event in a chrome trace,
    the timer's own spin kernel (``TIMER_KERNELS``) left out."""
    with open(trace_path, encoding="utf-8") as fh:
        events = json.load(fh).get("traceEvents", [])
    out = []
    for e in events:
        name = str(e.get("name", "?"))
        if (e.get("ph") == "X" and e.get("cat") in DEVICE_CATS
                and not any(t in name for t in TIMER_KERNELS)):
            out.append((name, float(e.get("ts", 0.0)), float(e.get("dur", 0.0))))
    return out


def device_activity(trace_path: str) -> list[tuple[str, float]]:
    """(name, duration in us) of every device activity event (timer spin left out)."""
    return [(name, dur) for name, _, dur in device_spans(trace_path)]


def device_time_us(trace_path: str) -> tuple[float, int]:
    """(summed duration in us, count) of device activity events (timer spin left out)."""
    dev = device_activity(trace_path)
    return float(sum(d for _, d in dev)), len(dev)


def busy_us(spans: list[tuple[str, float, float]]) -> float:
    """Length of the union of the spans' [start, start + duration) intervals: overlapping
    kernels (two streams) count once."""
    total, end = 0.0, float("-inf")
    for _, start, dur in sorted(spans, key=lambda s: s[1]):
        stop = start + dur
        if start >= end:
            total += dur
        elif stop > end:
            total += stop - end
        end = max(end, stop)
    return total


def per_name_us(activity: list[tuple[str, float]], calls: int,
                width: int = 60) -> tuple[tuple[str, float], ...]:
    """Durations summed by (shortened) name and divided by ``calls``, longest first."""
    sums: dict[str, float] = {}
    for name, dur in activity:
        key = name.replace("(anonymous namespace)", "(anon)").replace("void ", "")
        # drop the parameter list: the first "(" at depth 0 of template brackets that is not
        # "(anon)"
        depth, cut = 0, len(key)
        for i, ch in enumerate(key):
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0 and not key.startswith("(anon)", i):
                cut = i
                break
        key = key[:cut][:width]
        sums[key] = sums.get(key, 0.0) + dur
    return tuple(sorted(((k, v / calls) for k, v in sums.items()), key=lambda kv: -kv[1]))


def profiled_spans(fn, reps: int) -> list[tuple[str, float, float]]:
    """``device_spans`` of ``reps`` calls of ``fn`` under torch.profiler (CUDA activity),
    the device synchronised before and after."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    fd, trace = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(trace)
        return device_spans(trace)
    finally:
        os.unlink(trace)


def crosscheck(case, path, device, settings, batches: int = 20) -> CrossCheck:
    """Event-timed cold and graph medians and the profiler's device time for one (case, path)."""
    rule = StopRule.from_settings(settings)
    cold = setup_timing(case, path, device, "cold")
    cold_res = time_batches(cold.timer, rule, mode="cold")
    graph = setup_timing(case, path, device, "graph")
    graph_res = time_batches(graph.timer, rule, mode="graph")
    graph.close()
    cold.batch()
    spans = profiled_spans(cold.batch, batches)
    calls = batches * cold.calls
    return CrossCheck(case.id, path.name, cold_res.stats.median, graph_res.stats.median,
                      busy_us(spans) / calls, len(spans) / calls, cold.calls,
                      per_name_us([(n, d) for n, _, d in spans], calls))


def main(argv: list[str] | None = None) -> int:
    ap = case_path_parser("harness study crosscheck", __doc__)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--kernels", action="store_true",
                    help="also print each row's device time per call by kernel name")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("crosscheck: no CUDA GPU is visible; nothing to cross-check")
        return 0
    device = torch.device("cuda", torch.cuda.current_device())
    settings = load_settings()
    print(f"{'case':28s} {'path':18s} {'cold us':>9s} {'graph us':>9s} {'profiler':>9s} "
          f"{'cold/prof':>9s} {'graph/prof':>10s} {'kern/call':>9s}")

    def show(r: CrossCheck) -> None:
        print(f"{r.case_id:28s} {r.path:18s} {r.cold_us:9.2f} {r.graph_us:9.2f} "
              f"{r.profiler_us:9.2f} {r.cold_vs_profiler:+9.2%} {r.graph_vs_profiler:+10.2%} "
              f"{r.kernels_per_call:9.1f}", flush=True)
        if args.kernels:
            for kname, us in r.by_name:
                print(f"{'':30s}{us:9.2f} us  {kname}")

    results = run_each(ap, args, device,
                       lambda c, p: crosscheck(c, p, device, settings, args.batches), show)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump([asdict(r) for r in results], fh, indent=1)
    return 0

