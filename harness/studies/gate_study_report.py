"""Aggregation of a gate study's verdicts (``harness.studies.gate_study``); torch-free.

Input: one dict per gated row (``VERDICT_COLUMNS``): the repetition, ``kind`` ("aa": an
unchanged run; "planted": a run of ``planted_path`` with the 5% slowdown), the verdict,
the medians (baseline, current, and for planted rows the same repetition's A/A run) and
the slowdown the planted defect expected, and ``first`` (the verdict before a
re-measurement, e.g. "SLOWER +3.7%", empty when none). ``summarize`` gives the numbers the
issue asks for: false SLOWER over the A/A repetitions, planted slowdowns caught (per run: at
least one SLOWER row of the planted path fails the gate; per row: that row is SLOWER), the
slowdown really planted, and the A/A spread of the medians. ``render`` writes Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results.store import atomic_write_text

VERDICT_COLUMNS = ("rep", "kind", "planted_path", "case_id", "M", "path", "mode", "verdict",
                   "fails", "remeasured", "base_us", "cur_us", "change", "p_value", "threshold",
                   "margin", "aa_us", "expected_slowdown", "first", "reason")
SMALL_US = 20.0


def write_verdicts(path: str | Path, rows: Sequence[Mapping]) -> Path:
    """All verdicts so far, atomically (the study rewrites the file after each repetition)."""
    df = pd.DataFrame(list(rows), columns=list(VERDICT_COLUMNS))
    return atomic_write_text(path, df.to_csv(index=False))


def read_verdicts(path: str | Path) -> list[dict]:
    df = pd.read_csv(path)
    missing = [c for c in VERDICT_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    return df.to_dict("records")


def _pct(values: Sequence[float], q: float) -> float:
    v = [x for x in values if x is not None and math.isfinite(x)]
    return float(np.percentile(v, q)) if v else math.nan


def _spread(values: Sequence[float]) -> dict:
    v = [abs(x) for x in values if x is not None and math.isfinite(x)]
    return {"n": len(v), "median": _pct(v, 50), "p95": _pct(v, 95),
            "max": max(v) if v else math.nan}


def _truthy(x) -> bool:
    return (x is True or (isinstance(x, str) and x.lower() == "true")
            or (isinstance(x, (int, float)) and x == 1))


def summarize(verdicts: Sequence[Mapping]) -> dict:
    """The study's numbers; see the module docstring."""
    df = pd.DataFrame(list(verdicts), columns=list(VERDICT_COLUMNS))
    df["fails"] = df["fails"].map(_truthy)
    df["remeasured"] = df["remeasured"].map(_truthy)
    for c in ("base_us", "cur_us", "change", "aa_us", "expected_slowdown", "threshold"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    out: dict = {"aa": {}, "planted": {}}
    aa = df[df["kind"] == "aa"]
    if len(aa):
        reps = sorted(aa["rep"].unique())
        slower = aa[(aa["verdict"] == "SLOWER") & aa["fails"]]
        failing = aa[aa["fails"]]
        big = aa["base_us"] >= SMALL_US
        out["aa"] = {
            "reps": len(reps), "rows_per_rep": int(len(aa) / len(reps)),
            "verdicts": {str(k): int(v) for k, v in aa["verdict"].value_counts().items()},
            "false_slower_rows": int(len(slower)),
            "runs_with_false_slower": int(slower["rep"].nunique()),
            "runs_failing": int(failing["rep"].nunique()),
            "failing_rows": [f"rep {r.rep} {r.case_id} {r.path} {r.mode}: {r.verdict} ({r.reason})"
                             for r in failing.itertuples()][:40],
            "remeasured_rows": int(aa["remeasured"].sum()),
            "first_slower_cleared": int((aa["first"].astype(str).str.startswith("SLOWER")
                                         & (aa["verdict"] != "SLOWER")).sum()),
            "informational_slower": int(((aa["verdict"] == "SLOWER") & ~aa["fails"]).sum()),
            "delta_ge_20us": _spread(aa.loc[big, "change"].tolist()),
            "delta_lt_20us": _spread(aa.loc[~big, "change"].tolist()),
        }
    for path, grp in df[df["kind"] == "planted"].groupby("planted_path"):
        own = grp[grp["path"] == path]
        reps = sorted(own["rep"].unique())
        caught = own[(own["verdict"] == "SLOWER") & own["fails"]]
        achieved = (own["cur_us"] / own["aa_us"] - 1.0).tolist()
        marked = own.assign(achieved=own["cur_us"] / own["aa_us"] - 1.0,
                            hit=(own["verdict"] == "SLOWER") & own["fails"])
        by_case = marked.groupby("case_id").agg(
            rows=("hit", "size"), caught=("hit", "sum"), achieved=("achieved", "median"),
            expected=("expected_slowdown", "median"), threshold=("threshold", "median"),
            base_us=("base_us", "median"))
        missed = by_case[by_case["caught"] < by_case["rows"]].sort_values("caught")
        out["planted"][str(path)] = {
            "reps": len(reps), "runs_caught": int(caught["rep"].nunique()),
            "rows": int(len(own)), "rows_caught": int(len(caught)),
            "rows_caught_ge_20us": [
                int(((own["base_us"] >= SMALL_US) & own.index.isin(caught.index)).sum()),
                int((own["base_us"] >= SMALL_US).sum())],
            "achieved": {"median": _pct(achieved, 50), "p5": _pct(achieved, 5),
                         "p95": _pct(achieved, 95)},
            "expected": {"median": _pct(own["expected_slowdown"].tolist(), 50),
                         "max": _pct(own["expected_slowdown"].tolist(), 100)},
            "verdicts": {str(k): int(v) for k, v in own["verdict"].value_counts().items()},
            "other_failing_rows": int(grp[(grp["path"] != path) & grp["fails"]].shape[0]),
            "missed_cases": [{"case_id": str(i),
                              **{k: (float(v) if isinstance(v, (float, np.floating)) else int(v))
                                 for k, v in r.items()}}
                             for i, r in missed.iterrows()],
        }
    return out


def _f(x, spec=".2%") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def render(summary: Mapping, header: Mapping) -> str:
    """Markdown for docs / a PR comment."""
    lines = ["# Gate study: A/A repetitions and a planted 5% slowdown", "",
             f"Command: `{header.get('command', '')}`", ""]
    env = header.get("environment", {})
    if env:
        lines.append(f"{env.get('gpu_name')} (SM {env.get('compute_capability')}), "
                     f"driver {env.get('driver')}, "
                     f"torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                     f"commit {env.get('commit')}; "
                     f"{header.get('cases')} cases x paths {header.get('paths')}, "
                     f"modes {header.get('modes')}, "
                     f"{header.get('calibration_runs')} calibration runs, "
                     f"{header.get('reps_done')} repetitions.")
        lines.append("")
    segments = header.get("segments") or []
    if len(segments) > 1:
        lines += ["Segments (``--resume``; every one gated against the calibration of the first):",
                  ""]
        lines += [f"- repetitions {s.get('reps', ['?', '?'])[0]}-{s.get('reps', ['?', '?'])[1]}: "
                  f"commit {s.get('commit')}, {s.get('gpu')} on host {s.get('host')} "
                  f"(GPU {s.get('gpu_uuid') or '?'})"
                  for s in segments]
        lines.append("")
    a = summary.get("aa") or {}
    if a:
        lines += ["## A/A (same build, gated against calibration run 1 "
                  "with the calibrated margins)", "",
                  "| repetitions | rows gated / rep | false SLOWER rows | runs with a false SLOWER "
                  "| runs failing the gate | rows re-measured | first-time SLOWER cleared by it "
                  "| verdicts |",
                  "|---|---|---|---|---|---|---|---|",
                  f"| {a['reps']} | {a['rows_per_rep']} | {a['false_slower_rows']} "
                  f"| {a['runs_with_false_slower']} | "
                  f"{a['runs_failing']} | {a['remeasured_rows']} | {a['first_slower_cleared']} | "
                  + ", ".join(f"{k} {v}" for k, v in sorted(a["verdicts"].items())) + " |", ""]
        for label, key in ((">= 20 µs", "delta_ge_20us"), ("< 20 µs", "delta_lt_20us")):
            d = a[key]
            lines.append(f"|Δ median| vs the baseline, rows {label}: n={d['n']}, "
                         f"median {_f(d['median'])}, "
                         f"p95 {_f(d['p95'])}, max {_f(d['max'])}.")
        if a["failing_rows"]:
            lines += ["", "Failing A/A rows:", ""] + [f"- {r}" for r in a["failing_rows"]]
        lines.append("")
    for path, p in (summary.get("planted") or {}).items():
        lines += [f"## Planted 5% slowdown on `{path}`", "",
                  "| runs caught | rows SLOWER | rows >= 20 µs SLOWER "
                  "| slowdown measured (median, p5-p95) "
                  "| slowdown the defect expected (median, max) | other paths failing |",
                  "|---|---|---|---|---|---|",
                  f"| {p['runs_caught']} / {p['reps']} | {p['rows_caught']} / {p['rows']} | "
                  f"{p['rows_caught_ge_20us'][0]} / {p['rows_caught_ge_20us'][1]} | "
                  f"{_f(p['achieved']['median'])} "
                  f"({_f(p['achieved']['p5'])} .. {_f(p['achieved']['p95'])}) | "
                  f"{_f(p['expected']['median'])}, {_f(p['expected']['max'])} "
                  f"| {p['other_failing_rows']} |", ""]
        if p["missed_cases"]:
            lines += ["Cases not caught every time "
                      "(caught / rows, measured slowdown, threshold, baseline µs):", ""]
            lines += [f"- {m['case_id']}: {m['caught']} / {m['rows']}, {_f(m['achieved'])}, "
                      f"{_f(m['threshold'])}, {_f(m['base_us'], '.1f')}" for m in p["missed_cases"]]
            lines.append("")
    return "\n".join(lines) + "\n"
