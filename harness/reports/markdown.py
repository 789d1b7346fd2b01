"""Short text renderings of a gate result: a terminal table and a Markdown summary (for a
PR comment or ``$GITHUB_STEP_SUMMARY``), regressions first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..results.environment import Environment, is_env_note
from .verdicts import (
    MEANINGS,
    STAND_IN_MARK,
    STAND_IN_NOTE,
    GateResult,
    RowVerdict,
    Verdict,
    is_stand_in,
)

_ICON = {Verdict.SLOWER: "🐢", Verdict.FASTER: "🚀", Verdict.WORSE_ACCURACY: "🎯",
         Verdict.LESS_ACCURATE: "📉", Verdict.NONDETERMINISTIC: "🎲", Verdict.LOST_DISPATCH: "↪️",
         Verdict.MISSING: "❓", Verdict.ERROR: "💥", Verdict.WINNER_CHANGED: "🔀",
         Verdict.AMBIGUOUS: "〰️", Verdict.TIMING_NOT_COMPARABLE: "⏱️", Verdict.NEW: "🆕",
         Verdict.SAME: "="}


def fmt_us(x: float) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def fmt_pct(change: float) -> str:
    return "—" if not math.isfinite(change) else f"{change * 100:+.1f}%"


def _detail(v: RowVerdict, width: int = 90) -> str:
    text = v.reasons[0] if v.reasons else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def text_table(result: GateResult, changes_only: bool = False, max_rows: int = 60) -> str:
    """A fixed-width table for the terminal (SAME rows, and rows whose timing was not
    comparable and nothing else happened, hidden when ``changes_only``)."""
    quiet = (Verdict.SAME, Verdict.TIMING_NOT_COMPARABLE)
    rows = [v for v in result.verdicts if not (changes_only and v.verdict in quiet)]
    head = ("verdict", "case", "path", "mode", "base µs", "cur µs", "Δ time", "detail")
    body = [(str(v.verdict) + (" *" if v.fails else ""), v.case_id, _path(v), v.mode,
             fmt_us(v.base_median_us), fmt_us(v.cur_median_us), fmt_pct(v.time_change),
             _detail(v, 70))
            for v in rows[:max_rows]]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    if len(rows) > max_rows:
        lines.append(f"... and {len(rows) - max_rows} more rows")
    lines.append(summary_line(result) + ("  (* fails the gate)" if result.failures else ""))
    if any(is_stand_in(v.row) for v in rows):
        lines.append(STAND_IN_NOTE)
    return "\n".join(lines)


def _path(v: RowVerdict) -> str:
    """The path's name, marked when its row was measured by a CPU stand-in."""
    return v.path + (f" {STAND_IN_MARK}" if is_stand_in(v.row) else "")


def summary_line(result: GateResult) -> str:
    counts = {k: n for k, n in result.counts().items() if n}
    parts = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no rows"
    state = "PASS" if result.passed else f"FAIL ({len(result.failures)} regressions)"
    varied = [v for v in result.verdicts if v.nondeterministic]
    if varied:
        paths = ", ".join(sorted({v.path for v in varied}))
        parts += f"; {len(varied)} rows varied between runs on identical inputs ({paths})"
    return f"{state}: {parts}"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def md_frame(frame, limit: int = 40,
             more: str = "see index.html or merged.csv") -> list[str]:
    """A pandas DataFrame as Markdown table lines (at most ``limit`` rows, then a line
    saying how many more and where they are)."""
    if frame.empty:
        return ["_nothing to show_"]
    cols = [str(c) for c in frame.columns]
    out = [_md_row(cols), _md_row(("---",) * len(cols))]
    out += [_md_row(tuple(_cell(v) for v in rec)) for rec in frame.head(limit).itertuples(False)]
    if len(frame) > limit:
        out.append(f"\n…and {len(frame) - limit} more ({more}).")
    return out


def _cell(v) -> str:
    """A table cell: floats to two decimals (NaN as a dash), anything else as text."""
    if isinstance(v, float):
        return "—" if not math.isfinite(v) else f"{v:.2f}"
    return str(v)


def _md_table(rows: Sequence[RowVerdict], limit: int) -> list[str]:
    out = [_md_row(("verdict", "case", "path", "mode", "base µs", "now µs", "Δ time", "detail")),
           _md_row(("---",) * 8)]
    for v in rows[:limit]:
        out.append(_md_row((f"{_ICON[v.verdict]} {v.verdict}", f"`{v.case_id}`", _path(v), v.mode,
                            fmt_us(v.base_median_us), fmt_us(v.cur_median_us),
                            fmt_pct(v.time_change), _detail(v))))
    if len(rows) > limit:
        out.append(f"\n…and {len(rows) - limit} more (see the CSV/HTML report).")
    return out


def markdown_summary(
    result: GateResult, *, title: str = "INT4 GEMM gate", rule: Sequence[tuple[str, str]] = (),
    report_path: str = "", max_rows: int = 15, current_env: Environment | None = None,
    baseline_env: Environment | None = None,
) -> str:
    """A short Markdown summary: status, counts, regressions, improvements, ambiguities.

    The header names the environments (when given) and the environment warnings
    (``environment.ENV_NOTE_PREFIX`` notes); the other notes close the summary."""
    failed = result.failures
    head = "✅ no regressions" if not failed else f"❌ {len(failed)} regression(s)"
    versus = (f"`{result.current_label}` vs `{result.baseline_label}`" if result.has_baseline
              else f"`{result.current_label}` (no baseline)")
    lines = [f"### {title}: {head}", "", versus + "  ", summary_line(result), ""]
    envs = [(label, env) for label, env in (("Run", current_env), ("Baseline", baseline_env))
            if env]
    if envs:
        lines += [f"{label}: {env.summary()}  " for label, env in envs] + [""]
    env_notes = [n for n in result.notes if is_env_note(n)]
    if env_notes:
        lines += [f"⚠️ {n}  " for n in env_notes] + [""]
    s = result.settings
    lines.append(f"Preset `{s.preset}`: slower/faster needs Mann-Whitney p < {s.alpha:g} "
                 f"and a median change beyond max({s.min_effect:.0%}, per-case noise margin); "
                 f"rel_err gate {s.rel_err_gate:g} (or the path's bound); LESS_ACCURATE when "
                 f"rel_err grows more than "
                 f"{s.rel_err_growth:.0%} or rms_ulp_p99 (ULPs at each output row's RMS) more than "
                 f"max({s.rms_ulp_slack:g} ULP, {s.rms_ulp_growth:.0%}) over the baseline's.")
    lines.append("")
    changed = result.of(Verdict.WINNER_CHANGED)
    if changed:                 # first: what the runtime's dispatch should now be
        lines += [f"**Dispatch winner changed** ({len(changed)} class(es); "
                  + ("failing: fail_on_winner_change = 1" if any(v.fails for v in changed)
                     else "information") + ")", ""] + _md_table(changed, max_rows) + [""]
    failed = [v for v in failed if v.verdict != Verdict.WINNER_CHANGED]
    if failed:
        lines += ["**Regressions**", ""] + _md_table(failed, max_rows) + [""]
    ambiguous = result.of(Verdict.AMBIGUOUS)
    if ambiguous:
        lines += [f"**Ambiguous** ({len(ambiguous)}; not failing: the change is beyond the margin "
                  "but not significant)", ""] + _md_table(ambiguous, max_rows) + [""]
    slow_info = [v for v in result.of(Verdict.SLOWER) if not v.fails]
    if slow_info:
        lines += [f"**Slower, not failing** ({len(slow_info)}; peers, or eager / CPU / model-"
                  "forward times, which are information)", ""]
        lines += _md_table(slow_info, max_rows) + [""]
    faster = result.of(Verdict.FASTER)
    if faster:
        lines += [f"<details><summary>Faster ({len(faster)})</summary>", ""]
        lines += _md_table(faster, max_rows) + ["", "</details>", ""]
    if rule:
        lines += ["<details><summary>Fastest correct path per shape (the dispatch rule the data "
                  "supports)</summary>", ""]
        lines += [f"- {label}: {text}" for label, text in rule] + ["", "</details>", ""]
    for note in result.notes:
        if not is_env_note(note):
            lines.append(f"_{note}_  ")
    if any(is_stand_in(v.row) for v in result.verdicts):
        lines += ["", f"_{STAND_IN_NOTE}_"]
    lines += ["", "<details><summary>Verdicts explained</summary>", ""]
    lines += [f"- **{k}**: {t}" for k, t in MEANINGS.items()] + ["", "</details>", ""]
    if report_path:
        lines.append(f"Full report: `{report_path}`")
    return "\n".join(lines).rstrip() + "\n"
