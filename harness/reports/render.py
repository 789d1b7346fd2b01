"""Write the report files of one gate result: CSV, HTML and Markdown side by side.

``write_reports(result, out_dir, stem)`` writes ``<stem>.csv``, ``<stem>.html`` and
``<stem>.md`` atomically and returns their paths; with ``labels`` the CSV is the
side-by-side layout (``harness compare``), otherwise the full report layout.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..results.environment import Environment
from ..results.schema import ResultRow
from ..results.store import atomic_write_text
from .crossover import crossover, dispatch_rule
from .csv_report import report_frame, side_by_side_frame, write_frame_csv
from .html_report import render_html
from .markdown import markdown_summary
from .verdicts import GateResult


@dataclass(frozen=True)
class ReportFiles:
    csv: Path
    html: Path
    markdown: Path
    summary: str          # the Markdown text


def write_reports(
    result: GateResult, out_dir: str | Path, stem: str = "report", *,
    title: str = "INT4 GEMM report",
    rows: Sequence[ResultRow] | None = None, current_env: Environment | None = None,
    baseline_env: Environment | None = None, labels: Sequence[str] | None = None,
) -> ReportFiles:
    out = Path(out_dir)
    frame = side_by_side_frame(result, labels) if labels else report_frame(result)
    csv_path = write_frame_csv(out / f"{stem}.csv", frame)
    page = render_html(result, title=title, current_env=current_env, baseline_env=baseline_env,
                       rows=rows)
    html_path = atomic_write_text(out / f"{stem}.html", page)
    cur_rows = (rows if rows is not None
                else [v.current for v in result.verdicts if v.current is not None])
    rule = dispatch_rule(crossover(cur_rows, result.settings.rel_err_gate))
    summary = markdown_summary(result, title=title, rule=rule, report_path=str(html_path),
                               current_env=current_env, baseline_env=baseline_env)
    md_path = atomic_write_text(out / f"{stem}.md", summary)
    append_step_summary(summary)
    return ReportFiles(csv_path, html_path, md_path, summary)


def append_step_summary(summary: str) -> None:
    """Append a Markdown summary to ``$GITHUB_STEP_SUMMARY`` when it is set (GitHub
    Actions sets it: the job's summary page shows the file)."""
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(summary + "\n")
