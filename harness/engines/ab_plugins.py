"""What an A/B on this machine gives each side, and whether the measured code is a commit.

``harness job``'s A/B (``ab_step``) and machine factor (``projection_step``) measure
revisions in git worktrees. The run's own ``--plugin`` files were part of what it
measured (a planted slowdown, an extra path) and the baseline's commit was measured
without them, so they go to the current side (B) only, unless a file declares itself an
instrument (``HARNESS_AB_SIDES = "both"``: a timer, a probe), which both sides get. And a
checkout with uncommitted changes under ``harness/`` cannot be A/B'd: the code measured on
side B would not be a commit.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

from ..results.store import read_meta
from .bench_runner import with_requests
from .revisions import BenchRunner

#: A ``--plugin`` file that is an instrument rather than a change (a timer, a probe) says
#: so with this line at module level; the A/B step gives it to both sides.
BOTH_SIDES = re.compile(r"""^HARNESS_AB_SIDES\s*=\s*["']both["']""", re.MULTILINE)


def dirty(repo: Path) -> bool:
    """True when ``harness/`` has uncommitted changes (or git cannot say)."""
    proc = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "harness"],
                          capture_output=True, text=True)
    return proc.returncode != 0 or bool(proc.stdout.strip())


def both_sides(plugin: str, repo: Path) -> bool:
    """Whether the plugin file (absolute, or relative to ``repo``) declares
    ``HARNESS_AB_SIDES = "both"``; a module name, or a file without it, is a change of
    the current side."""
    path = Path(plugin) if Path(plugin).is_absolute() else repo / plugin
    try:
        return path.suffix == ".py" and bool(BOTH_SIDES.search(path.read_text()))
    except OSError:
        return False


def current_side_plugins(runner: BenchRunner, plugins: tuple[str, ...],
                         repo: Path = Path(".")) -> BenchRunner:
    """``runner`` with the run's own ``--plugin`` files given to the current side (B):
    they were part of what the run measured, and the baseline's commit was measured
    without them. A plugin that declares ``HARNESS_AB_SIDES = "both"`` (an instrument,
    e.g. the test suite's fake timer) goes to both sides."""
    if not plugins:
        return runner
    shared = tuple(p for p in plugins if both_sides(p, repo))
    return with_requests(
        runner, lambda req: replace(req, plugins=plugins if req.label == "B" else shared))


def run_plugins(run_dir: Path, matrices) -> tuple[str, ...]:
    """The ``--plugin`` files a stored run's ``matrices`` were measured with (their json's),
    each once, in order."""
    return tuple(dict.fromkeys(
        str(p) for m in matrices
        for p in read_meta(run_dir / f"{m}.json").extra.get("plugins", ()) or ()))
