"""``harness job --ab-confirm``: re-judge a matrix's failing SLOWER rows A/B on this machine.

For a gated matrix of a stored run whose gate failed on SLOWER rows, the baseline's own
commit (from the baseline json) and the current commit are measured here, interleaved,
restricted to those rows, by ``harness compare`` in git worktrees (the build cache is
shared); ``reports.ab_confirm.apply_ab`` then keeps each row that A/B also reads SLOWER
and clears the others. The A/B record is stored in the matrix's json (``ab_confirm``) and
the gate record is rewritten with the final verdicts, so ``harness report`` and
``harness merge`` replay the same verdicts. Why: docs/measurement.md §9.

Needs: the baseline's commit in this repository (CI: a full clone, e.g. actions/checkout
with ``fetch-depth: 0``) and no uncommitted change under ``harness/`` (the measured code
must be a commit). When either is missing, the verdicts stand and one line says why.

The run's ``--plugin`` files (its json's ``plugins``) are given to the current side only:
what the run measured, planted slowdowns included, is what A/B measures on that side.

Extension point: ``runner`` (a ``revisions.BenchRunner``) measures one revision's bench;
tests pass a fake one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..config import Settings
from ..errors import EXPECTED_ERRORS, one_line
from ..reports.ab_confirm import AB_KEY, ABRecord, ABRow, apply_ab
from ..reports.gate import evaluate, stored_remeasure
from ..reports.gate_record import write_gate_record
from ..reports.verdicts import GateResult, Verdict
from ..results.baseline import baseline_dir, load_baseline
from ..results.store import load_run, read_meta, write_meta
from .compare import compare
from .revisions import (
    BenchRequest,
    BenchRunner,
    case_filter,
    resolve_revision,
    subprocess_runner,
)


def _dirty(repo: Path) -> bool:
    """True when ``harness/`` has uncommitted changes (or git cannot say)."""
    proc = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "harness"],
                          capture_output=True, text=True)
    return proc.returncode != 0 or bool(proc.stdout.strip())


def current_side_plugins(runner: BenchRunner, plugins: tuple[str, ...]) -> BenchRunner:
    """``runner`` with the run's own ``--plugin`` files given to the current side (B) only:
    they were part of what the run measured (a planted slowdown, an extra path), and the
    baseline's commit was measured without them."""
    if not plugins:
        return runner

    def run(req: BenchRequest) -> None:
        runner(replace(req, plugins=plugins) if req.label == "B" else req)
    return run


def stored_gate(run_dir: Path, matrix: str, baselines: str | Path, arch: str,
                settings: Settings) -> tuple[GateResult, str]:
    """The matrix's gate as its bench reached it (stored confirmations replayed), and the
    baseline's commit."""
    run = load_run(run_dir / f"{matrix}.csv")
    base = load_baseline(baseline_dir(Path(baselines), arch), [matrix])
    result = evaluate(list(run.rows), base.rows, settings, margins=base.margins,
                      remeasure=stored_remeasure(run.confirmations),
                      current_label=run.label, baseline_label=base.label)
    return result, base.environment.commit


def ab_confirm_matrix(
    run_dir: Path, matrix: str, *, baselines: str | Path, arch: str, settings: Settings,
    rounds: int = 3, repo: Path = Path("."), runner: BenchRunner = subprocess_runner,
    echo: Callable[[str], None] = print,
) -> int | None:
    """A/B the failing SLOWER rows of ``matrix`` in ``run_dir``; the matrix's new exit code,
    or None when there was nothing to confirm or it could not be done (said in one line)."""
    result, base_commit = stored_gate(run_dir, matrix, baselines, arch, settings)
    slow = [v for v in result.failures if v.verdict == Verdict.SLOWER]
    if not slow:
        return None
    if len(slow) < len(result.failures):
        echo(f"harness job: A/B: {matrix} also fails on other verdicts; confirming its "
             f"{len(slow)} SLOWER row(s) only")
    try:
        if _dirty(repo):
            raise ValueError("uncommitted changes under harness/: the measured code is not a "
                             "commit")
        head = resolve_revision(repo, "HEAD")
        base = resolve_revision(repo, base_commit)
        rows = [v.current for v in slow if v.current is not None]
        plugins = tuple(str(p) for p in read_meta(run_dir / f"{matrix}.json").extra
                        .get("plugins", ()) or ())
        outcome = compare(base, head, settings, work_dir=run_dir / "ab" / matrix, repo=repo,
                          matrix=matrix, filter=case_filter(rows),
                          paths=sorted({v.path for v in slow}),
                          modes=sorted({v.mode for v in slow}), rounds=rounds,
                          runner=current_side_plugins(runner, plugins), echo=echo)
    except EXPECTED_ERRORS as exc:
        echo(f"harness job: A/B of {matrix} not done, its verdicts stand: {one_line(exc)}")
        return None
    got = {v.key: v for v in outcome.result.verdicts}
    record = ABRecord(matrix, base, head, rounds, tuple(
        ABRow(*v.key, got[v.key].verdict.value if v.key in got else Verdict.MISSING.value,
              got[v.key].time_change if v.key in got else float("nan"))
        for v in slow))
    final = apply_ab(result, record)
    csv_path = run_dir / f"{matrix}.csv"
    meta = read_meta(csv_path.with_suffix(".json"))
    write_meta(csv_path.with_suffix(".json"),
               replace(meta, extra={**meta.extra, AB_KEY: record.to_dict()}))
    write_gate_record(csv_path, final)
    echo(f"harness job: {final.notes[-1]}; {matrix} exit {final.exit_code}")
    return final.exit_code
