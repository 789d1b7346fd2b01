"""The dispatch policy as a page: the map of winners, the classes and the regret tables
(``harness policy`` writes ``policy/<arch>.md`` and ``.html`` beside the json).

The map: one row per shape (kind, N, K, group), one column per M bucket; a cell is
coloured by the path to dispatch and shaded by its lead (faint: a few percent, full: 50%
and more), grey for a tie, white with "?" where the runs disagree; a cell whose dispatcher
rules chose another path is marked "x" and its text says which. Torch-free.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.policy_file import Policy
from ..results.store import atomic_write_text
from .html_report import CSS
from .markdown import md_frame
from .plots import new_figure, svg_text
from .regret import MIXES, Regret, per_class_frame


def _colours(paths: list[str]) -> dict[str, tuple]:
    from .plots import _mpl  # matplotlib: only for a page that draws

    cmap = _mpl().colormaps["tab10"]
    return {p: cmap(i % 10) for i, p in enumerate(sorted(paths))}


def map_svg(policy: Policy) -> str:
    """The map of winners (see the module docstring) as inline SVG."""
    shapes = sorted({(c.kind, c.N, c.K, c.group) for c in policy.classes})
    edges = list(policy.m_edges)
    colours = _colours(sorted({c.path for c in policy.classes if c.path}))
    img = np.ones((len(shapes), len(edges), 4))
    fig = new_figure(figsize=(1.2 + 0.9 * len(edges), 1.0 + 0.42 * len(shapes)))
    ax = fig.add_subplot(1, 1, 1)
    for c in policy.classes:
        i, j = shapes.index((c.kind, c.N, c.K, c.group)), edges.index(c.M)
        text = ""
        if c.decision == "winner":
            shade = 0.3 + 0.7 * min(max(c.lead, 0.0) / 0.5, 1.0) if math.isfinite(c.lead) else 1
            img[i, j] = (*colours[c.path][:3], shade)
            text = f"{c.lead:+.0%}" if math.isfinite(c.lead) else "only"
        elif c.decision == "tie":
            img[i, j] = (0.82, 0.82, 0.82, 1.0)
            text = "tie"
        elif c.decision == "disagree":
            text = "?"
        if c.dispatcher and c.path and c.dispatcher != c.path:
            text = "x " + text
        ax.text(j, i, text, ha="center", va="center", fontsize=7)
    ax.imshow(img, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(edges)), [f"M<={e}" for e in edges], fontsize=7)
    ax.set_yticks(range(len(shapes)), [(f"{k} " if k != "gemm" else "") + f"N{n} K{kk} {g}"
                                       for k, n, kk, g in shapes], fontsize=7)
    ax.set_title(f"{policy.arch} ({', '.join(policy.models) or 'unknown GPU'}): path to "
                 "dispatch; shade = lead; x = the dispatcher's rules pick another", fontsize=8)
    from matplotlib.patches import Patch  # heavy: matplotlib, only for a page that draws

    ax.legend(handles=[Patch(color=col, label=p) for p, col in colours.items()]
              + [Patch(color=(0.82, 0.82, 0.82), label="tie")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    return svg_text(fig, "policy-map")


def classes_frame(policy: Policy) -> pd.DataFrame:
    return pd.DataFrame([{
        "class": c.label, "decision": c.decision, "path": c.path or "-",
        "runner-up": c.runner_up, "lead %": c.lead * 100,
        "lead 95% interval": (f"[{c.lead_lo:+.1%}, {c.lead_hi:+.1%}]"
                              if math.isfinite(c.lead_lo) else ""),
        "dispatcher rules": c.dispatcher,
        "per run": "; ".join(f"{r['run']}: {r['winner'] or '-'}"
                             + ("" if r.get("decisive") else " (tie)") for r in c.per_run),
    } for c in policy.classes])


def _md(df: pd.DataFrame) -> str:
    return "\n".join(md_frame(df, limit=400, more="see the HTML page"))


def policy_markdown(policy: Policy, table: Regret, command: str = "") -> str:
    counts = pd.Series([c.decision for c in policy.classes]).value_counts().to_dict()
    lines = [f"# Dispatch policy: {policy.arch}", "",
             f"GPU model(s): {', '.join(policy.models) or 'unknown'}; mode {policy.mode}; "
             f"{len(policy.classes)} classes: "
             + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), ""]
    if command:
        lines += [f"Made by `{command}`.", ""]
    lines += ["Runs: " + "; ".join(f"{s.get('run')} ({s.get('gpu')}, {s.get('commit')}, "
                                    f"{s.get('date')})" for s in policy.sources), ""]
    lines += ["## Regret against the policy, in percent of total time", "",
              "Mixes of M: " + "; ".join(f"{m}: " + ", ".join(f"M<={k} {w:.0%}"
                                                            for k, w in ws.items())
                                         for m, ws in MIXES.items()), "",
              _md(table.totals_frame()), "",
              "## Per class: the dispatcher's rules against the policy", "",
              _md(per_class_frame(table, ("dispatcher rules", "always fp16_cache",
                                          "always Marlin"))), "",
              "## Classes", "", _md(classes_frame(policy)), ""]
    return "\n".join(lines)


def policy_html(policy: Policy, table: Regret, command: str = "") -> str:
    esc = html.escape
    per_class = per_class_frame(table, ("dispatcher rules", "always fp16_cache",
                                        "always Marlin"))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Dispatch policy {esc(policy.arch)}</title>
<style>{CSS}</style></head><body>
<h1>Dispatch policy: {esc(policy.arch)}</h1>
<p class="meta">GPU model(s): {esc(', '.join(policy.models))}; mode {esc(policy.mode)};
{len(policy.classes)} classes{f"; made by <code>{esc(command)}</code>" if command else ""}</p>
<h2>Which path to dispatch where</h2>{map_svg(policy)}
<h2>Regret against the policy (percent of total time)</h2>
{table.totals_frame().to_html(index=False, float_format=lambda x: f"{x:.2f}")}
<p class="meta">Mixes of M: {esc("; ".join(f"{m}: " + ", ".join(f"M<={k} {w:.0%}"
                                                     for k, w in ws.items())
                                     for m, ws in MIXES.items()))}</p>
<h2>Per class</h2>{per_class.to_html(index=False, float_format=lambda x: f"{x:.2f}")}
<h2>Classes</h2>{classes_frame(policy).to_html(index=False, float_format=lambda x: f"{x:.2f}")}
</body></html>
"""


def write_policy_pages(policy: Policy, table: Regret, stem: Path, command: str = "") -> list[Path]:
    """``<stem>.md``, ``<stem>.html`` and the map alone, ``<stem>-map.svg``, atomically."""
    return [atomic_write_text(stem.with_suffix(".md"), policy_markdown(policy, table, command)),
            atomic_write_text(stem.with_suffix(".html"), policy_html(policy, table, command)),
            atomic_write_text(stem.with_name(stem.name + "-map.svg"), map_svg(policy))]
