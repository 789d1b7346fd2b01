"""Write a fleet report (``fleet.FleetRun`` records): ``merged.csv``, a self-contained
``index.html`` and ``summary.md``.

The page and the summary open with the fleet's exit code (the worst run's), then the
machines (each run's environment), one summary table (verdict counts per arch, machine
and path), the winners of every timed run side by side, and a section per arch with a
part per run: its exit code and reason, its verdict counts and its failing and ambiguous
rows (the tables of ``html_report`` / ``markdown``). ``write_fleet`` also appends the
summary to ``$GITHUB_STEP_SUMMARY`` when that is set, like every report.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import EXIT_ERROR, EXIT_FAIL, EXIT_NO_BASELINE, EXIT_PASS, EXIT_WRONG_RUNNER
from ..results.store import atomic_write_text
from .calibration import machine_label
from .csv_report import write_frame_csv
from .fleet import (
    FleetRun,
    by_arch,
    fleet_exit,
    machines_frame,
    merged_frame,
    rules_frame,
    speed_judged,
    summary_frame,
    untimed_note,
    winners_frame,
)
from .html_report import CSS, VERDICT_COLOURS, _badges, _styled_table, _verdict_frame
from .markdown import _md_table, md_frame, summary_line
from .render import append_step_summary
from .verdicts import MEANINGS, STAND_IN_NOTE, Verdict, is_stand_in

#: What each exit code means, for the reports' exit lines.
EXIT_MEANINGS = {EXIT_PASS: "pass", EXIT_FAIL: "a failing verdict", EXIT_ERROR: "an error",
                 EXIT_NO_BASELINE: "nothing to compare (no baseline yet)",
                 EXIT_WRONG_RUNNER: "the wrong runner"}
_EXTRA_CSS = """
.banner.warn { background: #fbe7a1; color: #6b4e00; }
section.arch { border-top: 3px solid #ccd; margin-top: 28px; }
article.run { margin: 10px 0 24px 12px; }
article.run td.reason { min-width: 360px; }
"""


@dataclass(frozen=True)
class FleetFiles:
    csv: Path
    html: Path
    markdown: Path
    summary: str          # the Markdown text


def _machines(runs: Sequence[FleetRun]) -> str:
    """"N machine(s)": told apart by boot id (VMs often share a host name), else host/GPU."""
    n = len({machine_label(r.environment) or r.machine for r in runs})
    return f"{n} machine" + ("" if n == 1 else "s")


def exit_line(runs: Sequence[FleetRun]) -> str:
    """``exit N (meaning): the worst of the runs' (label N, ...)``."""
    code = fleet_exit(runs)
    each = ", ".join(f"{r.label} {r.exit_code}" for r in sorted(runs, key=lambda r: (r.arch,
                                                                                     r.label)))
    return f"exit {code} ({EXIT_MEANINGS.get(code, 'an error')}): the worst of the runs' ({each})"


def _banner_class(code: int) -> str:
    return {EXIT_PASS: "pass", EXIT_NO_BASELINE: "warn"}.get(code, "fail")


def _run_line(run: FleetRun) -> str:
    return f"exit {run.exit_code}: {run.reason}"


# ---------------------------------------------------------------- HTML

def _frame_html(frame: pd.DataFrame, uuid: str, styles=None) -> str:
    """A plain table (escaped, no index); ``styles(styler)`` may colour it."""
    if frame.empty:
        return '<p class="note">nothing to show</p>'
    styler = frame.style.set_uuid(uuid).hide(axis="index").format(escape="html")
    if styles is not None:
        styler = styles(styler)
    return f'<div class="scroll">{styler.to_html()}</div>'


def _colour_counts(styler):
    """Summary cells with rows of a verdict coloured as the verdict; failing counts red."""
    for verdict, colour in VERDICT_COLOURS.items():
        if str(verdict) in styler.data.columns:
            styler = styler.map(lambda n, c=colour: f"background-color: {c}" if n else "",
                                subset=[str(verdict)])
    return styler.map(lambda n: "background-color: #f8c4c4; font-weight: 600" if n else "",
                      subset=["failing"])


def _colour_differs(styler):
    """Winner rows on which the runs disagree, highlighted."""
    def row(r):
        return ["background-color: #fbe7a1" if r["differs"] == "yes" else ""] * len(r)
    return styler.apply(row, axis=1)


def _run_html(run: FleetRun, index: int) -> str:
    esc = html.escape
    result = run.result
    flagged = [v for v in result.verdicts if v.fails or v.verdict == Verdict.AMBIGUOUS]
    table = (_styled_table(_verdict_frame(flagged), f"flagged_{index}") if flagged
             else '<p class="note">Nothing failed and nothing is ambiguous.</p>')
    cls = _banner_class(run.exit_code)
    notes = "".join(f'<p class="meta">{esc(n)}</p>' for n in (*result.notes, *run.notes))
    return (f'<article class="run" id="run-{index}"><h3>{esc(run.label)}</h3>'
            f'<p class="meta">{esc(run.environment.summary())}</p>'
            f'<p class="meta">Verdicts: {esc(run.verdicts_from)}; source {esc(run.source)}</p>'
            f'<div class="banner {cls}">{esc(_run_line(run))}</div>'
            f'<p class="meta">{esc(summary_line(result))}</p>{_badges(result)}{notes}'
            f'{table}</article>')


def render_fleet_html(runs: Sequence[FleetRun], title: str = "INT4 GEMM fleet report") -> str:
    """The whole self-contained page (inline CSS, no scripts, no network)."""
    esc = html.escape
    code = fleet_exit(runs)
    groups = by_arch(runs)
    ids = {id(run): i for i, run in enumerate(r for g in groups.values() for r in g)}
    arch_nav = "".join(f'<a href="#arch-{esc(a)}">{esc(a)}</a>' for a in groups)
    sections = "".join(
        f'<section class="arch" id="arch-{esc(arch)}"><h2>{esc(arch)} '
        f'({len(members)} run{"s" if len(members) > 1 else ""})</h2>'
        + "".join(_run_html(run, ids[id(run)]) for run in members) + "</section>"
        for arch, members in groups.items())
    runs_frame = pd.DataFrame(
        [{"run": r.label, "arch": r.arch, "GPU model": r.environment.gpu_name,
          "machine": r.machine, "verdicts from": r.verdicts_from, "speed judged": speed_judged(r),
          "exit": r.exit_code, "reason": r.reason} for g in groups.values() for r in g])
    untimed = untimed_note(runs)
    stand_in = any(is_stand_in(r) for run in runs for r in run.rows)
    glossary = "".join(f"<tr><td><b>{esc(str(k))}</b></td><td>{esc(t)}</td></tr>"
                       for k, t in MEANINGS.items())
    banner = _banner_class(code)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{CSS}{_EXTRA_CSS}</style></head>
<body>
<h1>{esc(title)}</h1>
<p class="meta">{len(runs)} runs, {_machines(runs)}, arches
{esc(", ".join(groups))}. Runs of one arch from different machines and GPU models are
shown apart; "speed judged" says whether a run's times were judged against its own model's
baseline, on the runner against another model's (the job's machine factor and A/B), or not
at all.</p>
<div class="banner {banner}" id="fleet-status">{esc(exit_line(runs))}</div>
<nav><a href="#machines">Machines</a><a href="#summary">Summary</a>
<a href="#winners">Which path wins where</a>{arch_nav}
<a href="#glossary">Verdicts explained</a></nav>
<section id="machines"><h2>Machines</h2>{_frame_html(machines_frame(runs), "machines")}</section>
<section id="summary"><h2>Summary: verdicts per arch, machine and path</h2>
{_frame_html(runs_frame, "runs")}
{_frame_html(summary_frame(runs), "summary", _colour_counts)}</section>
<section id="winners"><h2>Which path wins where</h2>
<p class="meta">The fastest correct path (status ok, rel_err within the gate) per shape and M,
each run beside the others; highlighted rows: the runs disagree.</p>
{f'<p class="note">{esc(untimed)}</p>' if untimed else ''}
<h3>The rule each run's data supports</h3>{_frame_html(rules_frame(runs), "rules")}
<h3>Per point</h3>{_frame_html(winners_frame(runs), "winners", _colour_differs)}</section>
{sections}
<section id="glossary"><h2>Verdicts explained</h2><table>{glossary}</table>
{f'<p class="note">{esc(STAND_IN_NOTE)}</p>' if stand_in else ''}
<p class="note">Exit codes: {esc("; ".join(f"{k} {v}" for k, v in EXIT_MEANINGS.items()))}.
The fleet's is the worst run's: an error over a failing verdict over a wrong runner over
nothing to compare over a pass.</p></section>
</body></html>
"""


# ---------------------------------------------------------------- Markdown

def fleet_markdown(runs: Sequence[FleetRun], *, title: str = "INT4 GEMM fleet",
                   report_path: str = "", max_rows: int = 10) -> str:
    """The fleet's Markdown summary (a PR comment, ``$GITHUB_STEP_SUMMARY``)."""
    code = fleet_exit(runs)
    icon = "✅" if code == EXIT_PASS else "⚠️" if code == EXIT_NO_BASELINE else "❌"
    lines = [f"### {title}: {icon} exit {code} ({EXIT_MEANINGS.get(code, 'an error')})", "",
             exit_line(runs), ""]
    changed = [(run, v) for run in runs for v in run.result.of(Verdict.WINNER_CHANGED)]
    if changed:             # first: the dispatch a runtime should now make
        lines += [f"**Dispatch winner changed** ({len(changed)} class(es) over the runs)", ""]
        lines += [f"- {run.label}: `{v.case_id}` {v.mode}: {v.path} now leads "
                  f"({v.reasons[0] if v.reasons else ''})" for run, v in changed[:max_rows]]
        lines.append("")
    lines += ["**Machines**", ""]
    lines += md_frame(machines_frame(runs).drop(columns=["source"]))
    lines += ["", "**Runs**", ""]
    lines += md_frame(pd.DataFrame(
        [{"run": r.label, "GPU model": r.environment.gpu_name,
          "verdicts from": r.verdicts_from, "speed judged": speed_judged(r),
          "exit": r.exit_code, "reason": r.reason}
         for g in by_arch(runs).values() for r in g]))
    lines += ["", "**Verdicts per arch, machine and path**", ""]
    lines += md_frame(summary_frame(runs).drop(columns=["machine"]), limit=60)
    lines += ["", "**Which path wins where** (the fastest correct path per shape and M, each "
              "run's data side by side)", ""]
    rules = rules_frame(runs)
    lines += md_frame(rules) if len(rules.columns) > 1 else ["_no timed runs_"]
    differs = winners_frame(runs)
    n_diff = int((differs["differs"] == "yes").sum()) if not differs.empty else 0
    lines += ["", f"The runs disagree on the winner at {n_diff} of {len(differs)} "
              "(shape, M, mode) points (index.html lists them)."]
    untimed = untimed_note(runs)
    if untimed:
        lines += ["", f"_{untimed}_"]
    for arch, members in by_arch(runs).items():
        lines += ["", f"#### {arch}"]
        for run in members:
            result = run.result
            lines += ["", f"**{run.label}**: {_run_line(run)}  ",
                      f"{run.environment.summary()}  ", summary_line(result) + "  "]
            lines += [f"_{n}_  " for n in (*result.notes, *run.notes)]
            flagged = [v for v in result.verdicts if v.fails or v.verdict == Verdict.AMBIGUOUS]
            if flagged:
                lines += [""] + _md_table(flagged, max_rows)
    lines.append("")
    if any(is_stand_in(r) for run in runs for r in run.rows):
        lines += [f"_{STAND_IN_NOTE}_", ""]
    if report_path:
        lines.append(f"Full report: `{report_path}`")
    return "\n".join(lines).rstrip() + "\n"


def write_fleet(runs: Sequence[FleetRun], out_dir: str | Path, *,
                title: str = "INT4 GEMM fleet report") -> FleetFiles:
    """Write ``merged.csv``, ``index.html`` and ``summary.md`` into ``out_dir`` (each
    atomically) and append the summary to ``$GITHUB_STEP_SUMMARY`` when set."""
    out = Path(out_dir)
    csv_path = write_frame_csv(out / "merged.csv", merged_frame(runs))
    html_path = atomic_write_text(out / "index.html", render_fleet_html(runs, title))
    summary = fleet_markdown(runs, report_path=str(html_path))
    md_path = atomic_write_text(out / "summary.md", summary)
    append_step_summary(summary)
    return FleetFiles(csv_path, html_path, md_path, summary)
