"""The history page: one self-contained HTML file (inline CSS and SVG, no scripts, no
network) of an arch's stored runs over the commit line, and the CSV of its steps.

Sections: the steps table (commit, kind, matrix, path, mode, rows that step of the
group's, median size and range, the verdict), per matrix the (path, mode) plots of
``history_plots.group_plot``, the gaps (commit, run, group, rows, reason: a gap is never
drawn as a value), the commits of the line with their runs, and runs whose commit is not
on the line. ``write_history`` writes ``<stem>.html`` and ``<stem>-steps.csv``.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings
from ..results.store import atomic_write_text
from .csv_report import write_frame_csv
from .history import History
from .history_plots import group_plot
from .html_report import CSS, VERDICT_COLOURS
from .steps import MARGIN_SIGMAS, PENALTY, WINDOW, Step, steps_frame
from .verdicts import STAND_IN_NOTE

_ESC = html.escape


def _steps_table(history: History, steps: Sequence[Step]) -> str:
    if not steps:
        return ('<p class="note" id="no-steps">No step beyond the gate\'s threshold on this '
                "line.</p>")
    slots = {s.index: s for s in history.slots}
    head = ("<tr><th>#</th><th>commit</th><th>subject</th><th>kind</th><th>matrix</th>"
            "<th>path</th><th>mode</th><th>rows</th><th>size (median; range)</th>"
            "<th>verdict</th><th>rows by verdict</th><th>cases</th></tr>")
    body = []
    for st in steps:
        slot = slots[st.index]
        sizes = [r.size for r in st.rows]
        colour = VERDICT_COLOURS.get(st.verdict, "#fff")
        body.append(
            f'<tr class="step"><td>{st.index}</td><td><code>{_ESC(slot.short)}</code></td>'
            f"<td>{_ESC(slot.subject[:80])}</td><td>{st.kind}</td><td>{_ESC(st.matrix)}</td>"
            f"<td>{_ESC(st.path)}</td><td>{_ESC(st.mode)}</td><td>{len(st.rows)} of {st.of}</td>"
            f"<td>{st.size:+.2%} ({min(sizes):+.2%} .. {max(sizes):+.2%})</td>"
            f'<td style="background:{colour};font-weight:600">{st.verdict}</td>'
            f"<td>{_ESC(st.counts())}</td>"
            f'<td class="reason">{_ESC(", ".join(r.key[1] for r in st.rows))}</td></tr>')
    return f'<div class="scroll"><table id="steps-table">{head}{"".join(body)}</table></div>'


def _gaps_table(history: History) -> str:
    count: Counter = Counter()
    for s in history.series:
        for p in s.points:
            if p.gap:
                count[(p.index, p.run or "—", s.matrix, s.path, s.mode, p.gap)] += 1
    if not count:
        return '<p class="note">No gaps: every row has a value at every run.</p>'
    slots = {s.index: s for s in history.slots}
    rows = "".join(
        f"<tr><td>{i}</td><td><code>{_ESC(slots[i].short)}</code></td><td>{_ESC(run)}</td>"
        f"<td>{_ESC(m)}</td><td>{_ESC(p)}</td><td>{_ESC(mode)}</td><td>{n}</td>"
        f'<td class="reason">{_ESC(why)}</td></tr>'
        for (i, run, m, p, mode, why), n in sorted(count.items()))
    return ('<div class="scroll"><table id="gaps-table"><tr><th>#</th><th>commit</th>'
            "<th>run</th><th>matrix</th><th>path</th><th>mode</th><th>rows</th><th>reason</th>"
            f"</tr>{rows}</table></div>")


def _commits_table(history: History) -> str:
    rows = "".join(
        f"<tr><td>{s.index}</td><td><code>{_ESC(s.sha)}</code></td>"
        f"<td>{_ESC(s.subject[:100])}</td>"
        f"<td>{_ESC(', '.join(r.name for r in s.runs) or 'no stored run')}</td></tr>"
        for s in history.slots)
    return ('<div class="scroll"><table id="commits-table"><tr><th>#</th><th>commit</th>'
            f"<th>subject</th><th>runs</th></tr>{rows}</table></div>")


def _plots(history: History, steps: Sequence[Step], settings: Settings) -> str:
    parts, matrix = [], None
    for group, series in history.groups().items():
        if group[0] != matrix:
            matrix = group[0]
            parts.append(f"<h3>matrix {_ESC(matrix)}</h3>")
        mine = [s for s in steps if (s.matrix, s.path, s.mode) == group]
        plot = group_plot(history, group, series, mine, settings.rel_err_growth)
        parts.append(f'<figure id="plot-{_ESC(plot.key)}"><h4>{_ESC(plot.title)}</h4>')
        parts.append(plot.svg if plot.svg else f'<p class="note">{_ESC(plot.note)}</p>')
        parts.append("</figure>")
    return "".join(parts) or '<p class="note">no rows on this line</p>'


def render_history_html(history: History, steps: Sequence[Step], settings: Settings, *,
                        title: str, notes: Sequence[str] = ()) -> str:
    """The whole page (see the module docstring)."""
    s = settings
    first, last = history.slots[0], history.slots[-1]
    meta = [
        f"{len(history.slots)} commits of the first-parent line, <code>{_ESC(first.short)}</code>"
        f" .. <code>{_ESC(last.short)}</code>, {history.runs} stored runs of "
        f"<b>{_ESC(history.arch)}</b>"
        + (f"; {history.trimmed} older commits without a run left out" if history.trimmed
           else ""),
        f"Steps: per row, ruptures PELT (l2, min_size 1) on the log of the per-commit medians, "
        f"penalty {PENALTY:g} x sigma² x max(1, ln n), sigma = max(noise margin / "
        f"{MARGIN_SIGMAS:.2f}, the series' MAD-based sigma); a step is kept beyond the gate's "
        f"threshold max(min_effect {s.min_effect:.1%}, the row's margin), and judged by the "
        f"gate's speed call (Mann-Whitney α={s.alpha:g}) on the samples of up to {WINDOW} "
        "commits each side. Accuracy: each commit's row gated against the previous "
        f"commit's (LESS_ACCURATE: rel_err growth beyond {s.rel_err_growth:.0%}, or the "
        "rms-ULP tolerance; WORSE_ACCURACY where it starts).",
        *(_ESC(n) for n in notes),
    ]
    if history.arch == "cpu":
        meta.append(f'<span id="stand-in-note">{_ESC(STAND_IN_NOTE)}</span>')
    off = "".join(f"<li><code>{_ESC(str(r.path))}</code></li>" for r in history.off_line)
    off_html = (f"<p>Runs whose commit is not on this line (another branch, or a name "
                f"that is not a commit):</p><ul>{off}</ul>" if off else
                '<p class="note">none</p>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_ESC(title)}</title><style>{CSS}
h4 {{ font-size: 13px; margin: 14px 0 2px 0; }}</style></head>
<body>
<h1>{_ESC(title)}</h1>
{''.join(f'<p class="meta">{m}</p>' for m in meta)}
<nav><a href="#steps">Steps</a><a href="#plots">Plots</a><a href="#gaps">Gaps</a>
<a href="#commits">Commits</a></nav>
<section id="steps"><h2>Steps</h2>{_steps_table(history, steps)}</section>
<section id="plots"><h2>Time and accuracy over commits</h2>
<p class="note">Per (matrix, path, mode): left the median time, right rel_err, each row
over its first value on the line (thin) and their geometric mean (thick; one marker per
stored run). Grey band: the noise band. Dashed lines: steps, before their commit. A grey x:
a commit without a value (a gap, see below), never drawn as a value.</p>
{_plots(history, steps, settings)}</section>
<section id="gaps"><h2>Gaps</h2>{_gaps_table(history)}</section>
<section id="commits"><h2>Commits</h2>{_commits_table(history)}
<h3>Other runs</h3>{off_html}</section>
</body></html>
"""


@dataclass(frozen=True)
class HistoryFiles:
    html: Path
    steps_csv: Path


def write_history(history: History, steps: Sequence[Step], settings: Settings,
                  out_dir: str | Path, stem: str = "history", *, title: str = "",
                  notes: Sequence[str] = ()) -> HistoryFiles:
    """Write ``<stem>.html`` and ``<stem>-steps.csv`` (``steps.STEP_COLUMNS``) atomically."""
    out = Path(out_dir)
    page = render_history_html(history, steps, settings,
                               title=title or f"Results history: {history.arch}", notes=notes)
    html_path = atomic_write_text(out / f"{stem}.html", page)
    csv_path = write_frame_csv(out / f"{stem}-steps.csv", steps_frame(steps, history))
    return HistoryFiles(html_path, csv_path)
