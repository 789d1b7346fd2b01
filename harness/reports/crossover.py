"""The crossover table: the fastest *correct* path per shape and M, i.e. the dispatch
rule the data supports on this GPU, next to what the dispatcher model chose.

A path is a candidate for a (shape, M, mode) when its row has ``role == "path"``
(TinyLoop ships it), ``status == "ok"``, a finite time and a finite ``rel_err`` within
the accuracy gate: ``settings.rel_err_gate``, or the path's documented bound for the case
(``rel_err_bound``, e.g. Marlin's per-column rows), as the gate judges it. Peers
(tinygemm, cuBLAS, fused-zero Marlin) are reported in their own column.
``fp16_cache_wins`` says whether the FP16 body cache is the winner (the seed expects it on
Hopper); ``is_fp16_cache_path`` decides which path that is.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..results.schema import ResultRow


def is_fp16_cache_path(name: str) -> bool:
    """The FP16 dequantized-cache path: a name containing 'fp16' (or 'f16') and 'cache'."""
    n = (name or "").lower()
    return "cache" in n and ("fp16" in n or "f16" in n)


@dataclass(frozen=True)
class CrossoverRow:
    kind: str
    N: int
    K: int
    group_size: int
    mode: str
    M: int
    fastest: str            # "" when no path was correct
    fastest_us: float
    runner_up: str
    runner_up_us: float
    lead: float             # runner_up_us / fastest_us - 1
    fp16_cache_us: float
    fp16_cache_wins: bool | None   # None: no FP16 cache row was a candidate
    dispatcher: str         # what the dispatcher model chose for this case
    agrees: bool | None     # dispatcher == fastest (None when either is unknown)
    best_peer: str
    best_peer_us: float
    excluded: str           # paths left out and why


def _correct(r: ResultRow, gate: float) -> str | None:
    """None if ``r`` is a candidate, else why not."""
    if r.status != "ok":
        return r.status
    if not (math.isfinite(r.time_us_median) and r.time_us_median > 0):
        return "no timing"
    if not math.isfinite(r.rel_err):
        return "accuracy not measured"
    bound = max(gate, r.rel_err_bound) if math.isfinite(r.rel_err_bound) else gate
    if r.rel_err > bound or r.nonfinite > 0:
        return f"rel_err {r.rel_err:.2g}" if r.nonfinite == 0 else "non-finite output"
    return None


def crossover(rows: Sequence[ResultRow], rel_err_gate: float) -> list[CrossoverRow]:
    """One ``CrossoverRow`` per (kind, N, K, group_size, mode, M), sorted by shape then M."""
    groups: dict[tuple, list[ResultRow]] = defaultdict(list)
    for r in rows:
        if r.kind == "ppl":
            continue
        groups[(r.kind, r.N, r.K, r.group_size, r.mode, r.M)].append(r)
    out = []
    for (kind, n, k, gs, mode, m), members in sorted(groups.items()):
        paths, peers, excluded = [], [], []
        for r in members:
            why = _correct(r, rel_err_gate)
            if why is not None:
                if r.role == "path":
                    excluded.append(f"{r.path}: {why}")
                continue
            (paths if r.role == "path" else peers).append(r)
        paths.sort(key=lambda r: r.time_us_median)
        peers.sort(key=lambda r: r.time_us_median)
        best = paths[0] if paths else None
        second = paths[1] if len(paths) > 1 else None
        cache = next((r for r in paths if is_fp16_cache_path(r.path)), None)
        dispatcher = next((r.dispatch_path for r in members if r.dispatch_path), "")
        out.append(CrossoverRow(
            kind=kind, N=n, K=k, group_size=gs, mode=mode, M=m,
            fastest=best.path if best else "",
            fastest_us=best.time_us_median if best else math.nan,
            runner_up=second.path if second else "",
            runner_up_us=second.time_us_median if second else math.nan,
            lead=((second.time_us_median / best.time_us_median - 1.0)
                  if best and second else math.nan),
            fp16_cache_us=cache.time_us_median if cache else math.nan,
            fp16_cache_wins=(best is cache) if cache is not None else None,
            dispatcher=dispatcher,
            agrees=(dispatcher == best.path) if best and dispatcher else None,
            best_peer=peers[0].path if peers else "",
            best_peer_us=peers[0].time_us_median if peers else math.nan,
            excluded="; ".join(sorted(excluded)),
        ))
    return out


def _m_label(lo: int, hi: int) -> str:
    return f"M={lo}" if lo == hi else f"M={lo}..{hi}"


def dispatch_rule(table: Sequence[CrossoverRow]) -> list[tuple[str, str]]:
    """Per (kind, N, K, group_size, mode): the winner over contiguous M ranges.

    Returns ``[(shape label, "M=1..8: fp16_cache; M=16..1024: marlin"), ...]``.
    """
    by_shape: dict[tuple, list[CrossoverRow]] = defaultdict(list)
    for row in table:
        by_shape[(row.kind, row.N, row.K, row.group_size, row.mode)].append(row)
    out = []
    for (kind, n, k, gs, mode), rows in sorted(by_shape.items()):
        rows = sorted(rows, key=lambda r: r.M)
        spans: list[list] = []
        for r in rows:
            winner = r.fastest or "(none correct)"
            if spans and spans[-1][2] == winner:
                spans[-1][1] = r.M
            else:
                spans.append([r.M, r.M, winner])
        gs_txt = "gK" if gs == k else f"g{gs}"
        prefix = "" if kind == "gemm" else f"{kind} "
        label = f"{prefix}N={n} K={k} {gs_txt} [{mode}]"
        out.append((label, "; ".join(f"{_m_label(lo, hi)}: {w}" for lo, hi, w in spans)))
    return out


def crossover_frame(table: Sequence[CrossoverRow]):
    """The table as a pandas DataFrame with report-friendly column names."""
    def yn(v):
        return "" if v is None else ("yes" if v else "no")

    return pd.DataFrame([{
        "kind": r.kind, "N": r.N, "K": r.K, "group_size": r.group_size, "mode": r.mode, "M": r.M,
        "fastest correct path": r.fastest or "(none)", "time µs": r.fastest_us,
        "runner-up": r.runner_up, "runner-up µs": r.runner_up_us, "lead %": r.lead * 100,
        "FP16 cache µs": r.fp16_cache_us, "FP16 cache wins": yn(r.fp16_cache_wins),
        "dispatcher chose": r.dispatcher, "dispatcher agrees": yn(r.agrees),
        "best peer": r.best_peer, "peer µs": r.best_peer_us, "not candidates": r.excluded,
    } for r in table])
