"""The HTML report: one self-contained file (inline CSS, inline SVG plots, no scripts, no
network), regressions first, then per-matrix tables with coloured deltas (pandas Styler),
the crossover table (the dispatch rule the data supports) and the plots.

``render_html`` takes a ``GateResult`` (against a baseline, or against nothing: then
every row is NEW and only absolute accuracy can fail) and returns the document text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd

from ..results.environment import Environment, is_env_note
from ..results.schema import ResultRow
from .crossover import crossover, crossover_frame, dispatch_rule
from .markdown import summary_line
from .plots import Plot, all_plots
from .verdicts import (
    MEANINGS,
    STAND_IN_MARK,
    STAND_IN_NOTE,
    GateResult,
    RowVerdict,
    Verdict,
    is_stand_in,
)

VERDICT_COLOURS = {
    Verdict.SLOWER: "#f8c4c4", Verdict.WORSE_ACCURACY: "#f4a6a6", Verdict.LOST_DISPATCH: "#f6b98a",
    Verdict.LESS_ACCURATE: "#f7c6a3", Verdict.NONDETERMINISTIC: "#f4b6d2",
    Verdict.MISSING: "#e8c4f0", Verdict.ERROR: "#e89090", Verdict.AMBIGUOUS: "#fbe7a1",
    Verdict.FASTER: "#c6efce", Verdict.NEW: "#d6e6fa", Verdict.SAME: "#f2f2f2",
    Verdict.TIMING_NOT_COMPARABLE: "#e4e4e4", Verdict.WINNER_CHANGED: "#cfe3f7",
}

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 24px;
       color: #1d1d1f; background: #fff; font-size: 14px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 15px; }
.meta { color: #555; font-size: 13px; margin: 2px 0; }
.envwarn { color: #8a5300; }
.banner { padding: 10px 14px; border-radius: 6px; font-weight: 600; margin: 12px 0; }
.banner.pass { background: #c6efce; color: #0b5d1e; }
.banner.fail { background: #f8c4c4; color: #8a1010; }
.badges span { display: inline-block; padding: 3px 9px; margin: 2px 4px 2px 0; border-radius: 10px;
               font-size: 12px; font-weight: 600; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0 16px 0; }
th { background: #fafafa; position: sticky; top: 0; text-align: left; }
th, td { border: 1px solid #e1e1e1; padding: 3px 6px; white-space: nowrap; }
td.reason, td.col_heading.reason { white-space: normal; max-width: 520px; }
.scroll { max-height: 680px; overflow: auto; border: 1px solid #eee; }
svg.plot { max-width: 100%; height: auto; }
.note { color: #777; font-style: italic; }
ul.rule li { font-family: ui-monospace, Menlo, monospace; font-size: 12px; }
nav a { margin-right: 14px; }
"""


def _fmt(x: float, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _badges(result: GateResult) -> str:
    spans = [f'<span style="background:{VERDICT_COLOURS[v]}">{v} {n}</span>'
             for v, n in result.counts().items() if n]
    return f'<div class="badges">{"".join(spans)}</div>'


def _verdict_frame(verdicts: Sequence[RowVerdict]):
    recs = []
    for v in verdicts:
        r = v.row
        cur = v.current
        recs.append({
            "verdict": str(v.verdict), "case": v.case_id,
            "path": v.path + (f" {STAND_IN_MARK}" if is_stand_in(r) else ""), "mode": v.mode,
            "M": r.M, "N": r.N, "K": r.K, "gs": r.group_size,
            "status": cur.status if cur else "(absent)",
            "dispatch": cur.dispatch_path if cur else "",
            "µs": v.cur_median_us, "base µs": v.base_median_us,
            "Δ time %": v.time_change * 100 if math.isfinite(v.time_change) else math.nan,
            "p": v.p_value,
            "TFLOPS": cur.tflops if cur else math.nan,
            "% roof": cur.pct_roofline if cur else math.nan,
            "rel_err": cur.rel_err if cur else math.nan,
            # the gated ULP figure first; the per-element ones (dominated by outputs near
            # zero) as detail
            "rms ULP p99": cur.rms_ulp_p99 if cur else math.nan,
            "elem. p99 ULP": cur.p99_ulp if cur else math.nan,
            "elem. max ULP": cur.max_ulp if cur else math.nan,
            "reason": "; ".join(v.reasons),
        })
    return pd.DataFrame(recs)


def _delta_style(row) -> list[str]:
    """Row-wise styles: the verdict cell by verdict, the Δ cell by verdict and size."""
    verdict = Verdict(row["verdict"])
    styles = [""] * len(row)
    cols = list(row.index)
    styles[cols.index("verdict")] = (f"background-color: {VERDICT_COLOURS[verdict]}; "
                                     "font-weight: 600")
    d = row["Δ time %"]
    if isinstance(d, float) and math.isfinite(d):
        strength = min(abs(d) / 20.0, 1.0)
        if verdict == Verdict.SLOWER or (verdict in (Verdict.AMBIGUOUS,) and d > 0):
            alpha = 0.25 + 0.6 * strength if verdict == Verdict.SLOWER else 0.3
            colour = (f"rgba(220, 40, 40, {alpha:.2f})" if verdict == Verdict.SLOWER
                      else "rgba(240, 190, 40, 0.5)")
        elif verdict == Verdict.FASTER:
            colour = f"rgba(40, 170, 70, {0.25 + 0.6 * strength:.2f})"
        else:
            colour = "transparent; color: #888"
        styles[cols.index("Δ time %")] = f"background-color: {colour}"
    return styles


def _styled_table(frame, uuid: str) -> str:
    if frame.empty:
        return '<p class="note">no rows</p>'
    styler = frame.style.set_uuid(uuid).hide(axis="index")
    styler = styler.format({
        "µs": lambda x: _fmt(x, ".2f"), "base µs": lambda x: _fmt(x, ".2f"),
        "Δ time %": lambda x: _fmt(x, "+.1f"), "p": lambda x: _fmt(x, ".2g"),
        "TFLOPS": lambda x: _fmt(x, ".3g"), "% roof": lambda x: _fmt(x, ".3g"),
        "rel_err": lambda x: _fmt(x, ".2e"), "rms ULP p99": lambda x: _fmt(x, ".2f"),
        "elem. p99 ULP": lambda x: _fmt(x, ".1f"), "elem. max ULP": lambda x: _fmt(x, ".0f"),
    }, escape="html")
    styler = styler.apply(_delta_style, axis=1)
    styler = styler.set_td_classes(frame.map(lambda _: "").assign(reason="reason"))
    return f'<div class="scroll">{styler.to_html()}</div>'


def _crossover_html(rows: Sequence[ResultRow], gate: float) -> str:
    table = crossover(rows, gate)
    if not table:
        return '<p class="note">no GEMM rows</p>'
    frame = crossover_frame(table)
    rule = dispatch_rule(table)
    items = "".join(f"<li>{html.escape(label)}: {html.escape(text)}</li>" for label, text in rule)

    def colour(row) -> list[str]:
        cols = list(row.index)
        styles = [""] * len(row)
        if row["FP16 cache wins"] == "yes":
            styles[cols.index("FP16 cache wins")] = "background-color: #d6e6fa; font-weight: 600"
        if row["dispatcher agrees"] == "no":
            styles[cols.index("dispatcher agrees")] = "background-color: #fbe7a1; font-weight: 600"
        if row["fastest correct path"] == "(none)":
            styles[cols.index("fastest correct path")] = "background-color: #f8c4c4"
        return styles

    fmt = {c: (lambda x: _fmt(x, ".2f"))
           for c in ("time µs", "runner-up µs", "FP16 cache µs", "peer µs")}
    fmt["lead %"] = lambda x: _fmt(x, ".1f")
    styler = frame.style.set_uuid("crossover").hide(axis="index").format(fmt, escape="html")
    styler = styler.apply(colour, axis=1)
    wins = sum(1 for r in table if r.fp16_cache_wins)
    known = sum(1 for r in table if r.fp16_cache_wins is not None)
    disagree = sum(1 for r in table if r.agrees is False)
    lead = (f"<p>The FP16 cache is the fastest correct path at {wins} of {known} "
            "(shape, M, mode) points where it ran correctly; the dispatcher model disagrees "
            f"with the data at {disagree} of "
            f"{len(table)} points. Candidates: TinyLoop paths with status ok and rel_err within "
            f"{gate:g}.</p>")
    return (f'{lead}<h3>Rule the data supports</h3><ul class="rule">{items}</ul>'
            f'<div class="scroll">{styler.to_html()}</div>')


def _plots_html(plots: Sequence[Plot]) -> str:
    parts = []
    for p in plots:
        parts.append(f'<figure id="plot-{p.key}"><h3>{html.escape(p.title)}</h3>')
        parts.append(p.svg if p.svg else f'<p class="note">{html.escape(p.note)}</p>')
        parts.append("</figure>")
    return "".join(parts)


def render_html(
    result: GateResult, *, title: str = "INT4 GEMM report", current_env: Environment | None = None,
    baseline_env: Environment | None = None, rows: Sequence[ResultRow] | None = None,
    extra_notes: Sequence[str] = (),
) -> str:
    """The whole document. ``rows`` (default: the result's current rows) feed the crossover
    table and the plots; they need not be gated."""
    if rows is None:
        rows = [v.current for v in result.verdicts if v.current is not None]
    s = result.settings
    esc = html.escape
    meta = [f"Run: <b>{esc(result.current_label)}</b>"
            + (f" — {esc(current_env.summary())}" if current_env else "")]
    if result.has_baseline:
        meta.append(f"Baseline: <b>{esc(result.baseline_label)}</b>"
                    + (f" — {esc(baseline_env.summary())}" if baseline_env else ""))
    else:
        meta.append("No baseline: every row is NEW; only absolute accuracy checks can fail.")
    meta.append(f"Preset <b>{esc(s.preset)}</b> ({esc(s.source)}): Mann-Whitney α={s.alpha:g}, "
                f"min effect {s.min_effect:.1%}, noise floor {s.noise_margin_floor:.1%}, "
                f"rel_err gate {s.rel_err_gate:g} (or the path's bound), "
                f"PPL tolerance {s.ppl_drift_tolerance:.1%}; LESS_ACCURATE against the "
                f"baseline: rel_err growth beyond {s.rel_err_growth:.0%}, or "
                f"rms ULP p99 (ULPs at each output row's RMS) beyond the baseline's + "
                f"max({s.rms_ulp_slack:g}, {s.rms_ulp_growth:.0%} of it); "
                "per-element ULPs are detail")
    meta += [f'<b class="envwarn">⚠ {esc(n)}</b>' if is_env_note(n) else esc(n)
             for n in (*result.notes, *extra_notes)]
    if any(is_stand_in(v.row) for v in result.verdicts):
        meta.append(f'<span id="stand-in-note">{esc(STAND_IN_NOTE)}</span>')
    glossary = "".join(f"<tr><td><b>{esc(str(k))}</b></td><td>{esc(t)}</td></tr>"
                       for k, t in MEANINGS.items())
    banner_cls = "pass" if result.passed else "fail"
    flagged = [v for v in result.verdicts if v.fails or v.verdict == Verdict.AMBIGUOUS]
    regress = (_styled_table(_verdict_frame(flagged), "regressions") if flagged
               else '<p class="note">Nothing regressed and nothing is ambiguous.</p>')
    matrices = sorted({v.matrix for v in result.verdicts})
    tables = "".join(
        f'<h3 id="matrix-{esc(m)}">matrix {esc(m)}</h3>'
        + _styled_table(_verdict_frame([v for v in result.verdicts if v.matrix == m]), f"m_{m}")
        for m in matrices)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{CSS}</style></head>
<body>
<h1>{esc(title)}</h1>
{''.join(f'<p class="meta">{m}</p>' for m in meta)}
<nav><a href="#regressions">Regressions</a><a href="#tables">Tables</a>
<a href="#crossover">Crossover</a><a href="#plots">Plots</a>
<a href="#glossary">Verdicts explained</a></nav>
<section id="regressions"><h2>Regression summary</h2>
<div class="banner {banner_cls}" id="gate-status">{esc(summary_line(result))}</div>
{_badges(result)}
{regress}
</section>
<section id="tables"><h2>Results per matrix</h2>{tables or '<p class="note">no rows</p>'}</section>
<section id="crossover"><h2>Crossover: fastest correct path per shape and M</h2>
{_crossover_html(rows, s.rel_err_gate)}</section>
<section id="plots"><h2>Plots</h2>{_plots_html(all_plots(rows))}</section>
<section id="glossary"><h2>Verdicts explained</h2><table>{glossary}</table>
<p class="note">Peers never fail; eager (cold), CPU and model-forward times are information
unless gate_eager_speed = 1. Exit codes: 0 pass, 1 a failing verdict, 2 an error.</p></section>
</body></html>
"""
