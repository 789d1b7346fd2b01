"""Report plots, rendered by matplotlib (no pyplot, no GUI) as inline SVG strings.

Each ``*_plot(rows)`` returns a ``Plot``; ``svg`` is None (with ``note`` saying why)
when the rows carry nothing to draw, e.g. all-NaN timings from a CPU run. Colours are
fixed per path name across all plots (``path_colours``).

Extension point: a new plot is one function here returning ``Plot`` and one entry in
``all_plots``.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..results.schema import ResultRow

_MODE_STYLE = {"graph": "-", "cold": "--", "cpu": ":", "model": "-."}


@dataclass(frozen=True)
class Plot:
    key: str
    title: str
    svg: str | None
    note: str = ""


def _mpl():
    """matplotlib with its ``figure`` module, imported on the first plot drawn."""
    import matplotlib.figure  # heavy: matplotlib (~0.3 s), only for commands that draw

    return matplotlib


def _new_figure(**kwargs):
    return _mpl().figure.Figure(layout="constrained", **kwargs)


def new_figure(**kwargs):
    """A matplotlib ``Figure`` (constrained layout, no pyplot), for plots drawn elsewhere in
    ``harness.reports`` (the history page)."""
    return _new_figure(**kwargs)


def svg_text(fig, key: str) -> str:
    """``fig`` as an inline ``<svg class="plot">`` string (deterministic ids from ``key``)."""
    return _svg(fig, key)


def path_colours(rows: Sequence[ResultRow]) -> dict[str, str]:
    cmap = _mpl().colormaps["tab10"]
    return {p: cmap(i % 10) for i, p in enumerate(sorted({r.path for r in rows}))}


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _shape_label(kind: str, n: int, k: int, gs: int) -> str:
    prefix = "" if kind == "gemm" else f"{kind} "
    return f"{prefix}N={n} K={k} {'gK' if gs == k else f'g{gs}'}"


def _svg(fig, key: str) -> str:
    buf = io.StringIO()
    with _mpl().rc_context({"svg.fonttype": "none", "svg.hashsalt": key}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    start = text.find("<svg")
    svg = text[start:] if start >= 0 else text
    return svg.replace("<svg", '<svg class="plot"', 1)


def _figure(n_panels: int, ncols: int = 3, w: float = 4.6, h: float = 3.3):
    ncols = max(1, min(ncols, n_panels))
    nrows = math.ceil(n_panels / ncols)
    fig = _new_figure(figsize=(w * ncols, h * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _timed(rows: Sequence[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.kind != "ppl" and r.status == "ok"]


def _flops(kind: str, m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k * (2 if kind == "swiglu_pair" else 1)


def _per_shape_vs_m(rows: Sequence[ResultRow], metric: str, key: str, title: str, ylabel: str,
                    roofline: bool, log_y: bool = False) -> Plot:
    good = [r for r in _timed(rows) if _finite(getattr(r, metric))]
    if not good:
        return Plot(key, title, None, f"no finite {metric} in these rows (a CPU run?)")
    colours = path_colours(rows)
    shapes: dict[tuple, list[ResultRow]] = defaultdict(list)
    for r in good:
        shapes[(r.kind, r.N, r.K, r.group_size)].append(r)
    fig, axes = _figure(len(shapes))
    for ax, (shape, members) in zip(axes, sorted(shapes.items()), strict=True):
        lines: dict[tuple, list[ResultRow]] = defaultdict(list)
        for r in members:
            lines[(r.path, r.mode)].append(r)
        for (path, mode), pts in sorted(lines.items()):
            pts.sort(key=lambda r: r.M)
            ax.plot([r.M for r in pts], [getattr(r, metric) for r in pts], marker="o", ms=3,
                    color=colours[path], ls=_MODE_STYLE.get(mode, "-"), label=f"{path} ({mode})")
        if roofline:
            floor: dict[int, float] = {}
            for r in rows:
                if ((r.kind, r.N, r.K, r.group_size) == shape
                        and _finite(r.roofline_floor_us) and r.roofline_floor_us > 0):
                    floor[r.M] = min(floor.get(r.M, math.inf), r.roofline_floor_us)
            if floor:
                ms = sorted(floor)
                kind, n, k, _ = shape
                roof = [_flops(kind, m, n, k) / (floor[m] * 1e-6) / 1e12 for m in ms]
                ax.plot(ms, roof, color="black", lw=1.2, ls="-", alpha=0.6, label="roofline")
        ax.set_xscale("log", base=2)
        if log_y:
            ax.set_yscale("log")
        ax.set_title(_shape_label(*shape), fontsize=9)
        ax.set_xlabel("M")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    return Plot(key, title, _svg(fig, key))


def tflops_plot(rows: Sequence[ResultRow]) -> Plot:
    return _per_shape_vs_m(rows, "tflops", "tflops",
                           "TFLOPS vs M per path (solid: graph, dashed: cold)",
                           "TFLOPS", roofline=True, log_y=True)


def roofline_pct_plot(rows: Sequence[ResultRow]) -> Plot:
    return _per_shape_vs_m(rows, "pct_roofline", "pct_roofline", "% of roofline vs M per path",
                           "% of roofline", roofline=False)


def ulp_plot(rows: Sequence[ResultRow]) -> Plot:
    key = "ulp"
    title = ("ULP error per case (circles: p99 in ULPs at each output row's RMS, the gated figure; "
             "crosses: per-element p99, detail)")
    seen: dict[tuple, ResultRow] = {}
    for r in _timed(rows):
        if _finite(r.rms_ulp_p99) or _finite(r.p99_ulp):
            seen.setdefault((r.case_id, r.path), r)
    if not seen:
        return Plot(key, title, None, "no ULP measurements in these rows")
    shape_of = {r.case_id: (r.kind, r.N, r.K, r.group_size, r.M) for r in seen.values()}
    cases = sorted(shape_of.items(), key=lambda kv: kv[1])
    index = {c: i for i, (c, _) in enumerate(cases)}
    colours = path_colours(rows)
    fig = _new_figure(figsize=(max(6.0, 0.22 * len(cases) + 2), 4.2))
    ax = fig.subplots()
    by_path: dict[str, list[ResultRow]] = defaultdict(list)
    for (_, path), r in sorted(seen.items()):
        by_path[path].append(r)
    for path, pts in by_path.items():
        ax.scatter([index[r.case_id] for r in pts], [r.rms_ulp_p99 for r in pts], s=14, marker="o",
                   color=colours[path], label=f"{path} rms p99")
        ax.scatter([index[r.case_id] for r in pts], [r.p99_ulp for r in pts], s=14, marker="x",
                   color=colours[path], label=f"{path} elem. p99")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xticks(range(len(cases)), [c for c, _ in cases], rotation=90, fontsize=6)
    ax.set_ylabel("ULP (fp16)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    return Plot(key, title, _svg(fig, key))


def correction_plot(rows: Sequence[ResultRow]) -> Plot:
    key, title = "correction", "Asymmetric-correction overhead over Marlin alone, % (vs M)"
    good = [r for r in _timed(rows) if _finite(r.correction_overhead_pct)]
    if not good:
        return Plot(key, title, None,
                    "no correction_overhead_pct in these rows (no Marlin rows timed)")
    lines: dict[tuple, list[ResultRow]] = defaultdict(list)
    for r in good:
        lines[(r.kind, r.N, r.K, r.group_size, r.path, r.mode)].append(r)
    # one legend entry per (shape, path, mode): beside the axes, the figure as tall as it
    # needs (inside a 4 inch axes 30+ entries collapsed the layout)
    ncol = 1 if len(lines) <= 24 else 2
    fig = _new_figure(figsize=(7.5 + 2.8 * ncol,
                               max(4.2, 0.13 * math.ceil(len(lines) / ncol) + 0.8)))
    ax = fig.subplots()
    shapes = sorted({key[:4] for key in lines})        # a colour per shape, a style per mode
    cmap = _mpl().colormaps["tab10" if len(shapes) <= 10 else "tab20"]
    for (kind, n, k, gs, path, mode), pts in sorted(lines.items()):
        pts.sort(key=lambda r: r.M)
        ax.plot([r.M for r in pts], [r.correction_overhead_pct for r in pts], marker="o", ms=3,
                ls=_MODE_STYLE.get(mode, "-"), color=cmap(shapes.index((kind, n, k, gs)) % 20),
                label=f"{_shape_label(kind, n, k, gs)} {path} ({mode})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M")
    ax.set_ylabel("overhead %")
    ax.grid(True, alpha=0.3)
    fig.legend(fontsize=6, loc="outside right upper", ncol=ncol)
    return Plot(key, title, _svg(fig, key))


def memory_plot(rows: Sequence[ResultRow]) -> Plot:
    key, title = "memory", "Extra device memory per path (MiB beyond the packed INT4 weight)"
    extra: dict[tuple, dict[str, int]] = defaultdict(dict)
    for r in rows:
        if r.kind != "ppl" and r.status == "ok":
            shape = (r.kind, r.N, r.K, r.group_size)
            extra[shape][r.path] = max(extra[shape].get(r.path, 0), int(r.extra_bytes))
    if not any(v for d in extra.values() for v in d.values()):
        return Plot(key, title, None, "no extra_bytes recorded in these rows")
    shapes = sorted(extra)
    paths = sorted({p for d in extra.values() for p in d})
    colours = path_colours(rows)
    fig = _new_figure(figsize=(max(6.0, 1.1 * len(shapes) + 2), 4.2))
    ax = fig.subplots()
    width = 0.8 / max(1, len(paths))
    x = np.arange(len(shapes))
    for i, path in enumerate(paths):
        ax.bar(x + i * width, [extra[s].get(path, 0) / 2**20 for s in shapes], width,
               color=colours[path], label=path)
    ax.set_xticks(x + 0.4 - width / 2, [_shape_label(*s) for s in shapes], rotation=30,
                  ha="right", fontsize=7)
    ax.set_ylabel("MiB")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return Plot(key, title, _svg(fig, key))


def all_plots(rows: Sequence[ResultRow]) -> list[Plot]:
    """Every report plot, in report order."""
    return [tflops_plot(rows), roofline_pct_plot(rows), ulp_plot(rows), correction_plot(rows),
            memory_plot(rows)]
