"""``harness job``'s A/B confirmation: gated rows that moved are re-judged A/B on this machine.

For each gated matrix of a stored run, the rows to confirm are those its gate failed as
SLOWER and those the *screen* flags (``reports.ab_confirm.screen_keys``): a gated row
whose median moved beyond the setting ``ab_screen`` (2%) against the stored baseline,
Mann-Whitney significant, whatever its cross-machine margin, and every gated row of a
(path, mode) whose median change is beyond it. The commit each baseline row was measured
at (its ``commit``; the baseline json's where the row has none) and the current commit
are measured here, interleaved, restricted to those rows, by ``harness compare`` in git
worktrees (the build cache is shared; one compare for the rows of all matrices: a
baseline promoted with ``harness baseline accept --only-faster`` holds rows of several
commits, and its A side then measures each commit's rows at that commit in every round,
``compare.APart``, beside one B bench of all the rows); ``reports.ab_confirm.apply_ab``
then makes the A/B verdict the row's: SLOWER fails (also for a row inside its
cross-machine margin), SAME or FASTER clears. The A/B record is stored in the matrix's
json (``ab_confirm``) and the gate record is rewritten with the final verdicts, so
``harness report``, ``harness compare`` and ``harness merge`` replay the same verdicts.
Why: between H200s the same build reads ~1.3% (sd) apart per row, up to 5% on single
rows, while processes on one machine differ by ~0.55% at the median, so no cross-machine
margin both holds an unchanged build and catches a 5% slowdown on 95% of the rows
(docs/measurement.md §9).

Needs: the baseline's commit in this repository (CI: a full clone, e.g. actions/checkout
with ``fetch-depth: 0``) and no uncommitted change under ``harness/`` (the measured code
must be a commit). When either is missing, the verdicts stand and one line says why.

The run's ``--plugin`` files (its json's ``plugins``) are given to the current side only:
what the run measured, planted slowdowns included, is what A/B measures on that side. A
plugin file declaring ``HARNESS_AB_SIDES = "both"`` (an instrument) goes to both sides.

Extension point: ``runner`` (a ``revisions.BenchRunner``) measures one revision's bench;
tests pass a fake one.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import Settings
from ..errors import EXPECTED_ERRORS, one_line
from ..reports.ab_confirm import AB_KEY, ABRecord, ABRow, apply_ab, same_commit, screen_keys
from ..reports.gate import evaluate, stored_remeasure
from ..reports.gate_record import stored_partial, write_gate_record
from ..reports.projection import PROJECTED
from ..reports.verdicts import GateResult, RowVerdict, Verdict
from ..results.baseline import check_baseline_gate, run_settings
from ..results.models import load_for_model
from ..results.store import load_run, read_meta, write_meta
from .bench_runner import bench_timeline, with_requests
from .compare import APart, compare, selection
from .projection_step import Projected, factor_bench_settings, measure_sample, project, sample_plan
from .revisions import (
    BenchRunner,
    resolve_revision,
    subprocess_runner,
)


def _dirty(repo: Path) -> bool:
    """True when ``harness/`` has uncommitted changes (or git cannot say)."""
    proc = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "harness"],
                          capture_output=True, text=True)
    return proc.returncode != 0 or bool(proc.stdout.strip())


#: A ``--plugin`` file that is an instrument rather than a change (a timer, a probe) says
#: so with this line at module level; the A/B step gives it to both sides.
BOTH_SIDES = re.compile(r"""^HARNESS_AB_SIDES\s*=\s*["']both["']""", re.MULTILINE)


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
    they were part of what the run measured (a planted slowdown, an extra path), and the
    baseline's commit was measured without them. A plugin that declares
    ``HARNESS_AB_SIDES = "both"`` (an instrument, e.g. the test suite's fake timer) goes
    to both sides."""
    if not plugins:
        return runner
    shared = tuple(p for p in plugins if both_sides(p, repo))
    return with_requests(
        runner, lambda req: replace(req, plugins=plugins if req.label == "B" else shared))


@dataclass(frozen=True)
class StoredGate:
    """A matrix's gate as its bench reached it, and what the A/B needs of it."""

    result: GateResult
    base_commit: str
    screened: set[tuple[str, str, str]]
    partial: bool | str
    #: another GPU model than the baseline's: (the baseline's model, this run's), else None
    models: tuple[str, str] | None = None


def stored_gate(run_dir: Path, matrix: str, baselines: str | Path, arch: str,
                settings: Settings) -> StoredGate:
    """The matrix's gate as its bench reached it (the baseline of the run's GPU model when
    there is one, ``results.models``; stored confirmations replayed, a partial bench's
    unmeasured baseline rows not judged), the baseline's commit, the keys the A/B screen
    flags (``reports.ab_confirm.screen_keys``; none for another GPU model, whose timing
    rows the projection screens) and whether the gate was partial; the run and the
    baseline are read once."""
    run = load_run(run_dir / f"{matrix}.csv")
    env = run.metas[matrix].environment if matrix in run.metas else run.environment
    base = load_for_model(baselines, arch, env.gpu_name, [matrix])
    check = check_baseline_gate(base, env, lambda m: run_settings(run, m))
    partial = stored_partial(run.metas)
    result = evaluate(list(run.rows), base.rows, settings, margins=base.margins,
                      remeasure=stored_remeasure(run.confirmations), partial=partial,
                      current_label=run.label, baseline_label=base.label,
                      timing_reason=check.timing_reason)
    if check.timing_reason:
        return StoredGate(result, base.environment.commit, set(), partial,
                          (base.environment.gpu_name, env.gpu_name))
    return StoredGate(result, base.environment.commit,
                      screen_keys(list(run.rows), base.rows, settings, partial=partial), partial)


@dataclass
class _Pending:
    """One matrix's rows to confirm: its stored gate, the baseline's commit, the rows;
    for another GPU model, how it was projected (``projection_step``)."""

    result: GateResult
    base_commit: str
    slow: list
    partial: bool | str = False
    projected: Projected | None = None


def _pending(run_dir: Path, matrix: str, baselines: str | Path, arch: str, settings: Settings,
             echo: Callable[[str], None]) -> tuple[_Pending | None, StoredGate]:
    gate = stored_gate(run_dir, matrix, baselines, arch, settings)
    if gate.models is not None:         # judged by the projection first (``_project``)
        return _Pending(gate.result, gate.base_commit, [], gate.partial), gate
    result, base_commit, screened, partial = (gate.result, gate.base_commit, gate.screened,
                                              gate.partial)
    failing = [v for v in result.failures if v.verdict == Verdict.SLOWER]
    have = {v.key for v in failing}
    slow = failing + [v for v in result.verdicts
                      if v.key in screened and v.key not in have and v.current is not None]
    if not slow:
        return None, gate
    if len(failing) < len(result.failures):
        echo(f"harness job: A/B: {matrix} also fails on other verdicts; confirming its "
             f"{len(failing)} SLOWER row(s) only")
    echo(f"harness job: A/B of {matrix}: {len(failing)} SLOWER row(s), "
         f"{len(slow) - len(failing)} more moved beyond the {settings.ab_screen:.1%} screen")
    return _Pending(result, base_commit, slow, partial), gate


def _project(foreign: dict[str, _Pending], models: Mapping[str, tuple[str, str]],
             run_dir: Path, settings: Settings, repo: Path, runner: BenchRunner,
             echo: Callable[[str], None]) -> None:
    """Judge the matrices of another GPU model on this runner (``projection_step``): fill
    each one's ``projected`` and the rows its screen sends to A/B; where the baseline's
    commit cannot be measured here, one line says why and they are dropped (their timing
    rows stay TIMING_NOT_COMPARABLE)."""
    ref, here = next(iter(models.values()))
    try:
        if _dirty(repo):
            raise ValueError("uncommitted changes under harness/: the measured code is "
                             "not a commit")
        plugins = tuple(dict.fromkeys(
            str(p) for m in foreign
            for p in read_meta(run_dir / f"{m}.json").extra.get("plugins", ()) or ()))
        plan = sample_plan({m: p.result for m, p in foreign.items()}, settings, row_commit,
                           {m: p.base_commit for m, p in foreign.items()})
        measured = measure_sample(
            plan, repo=repo, work_dir=run_dir / "ab" / "projection",
            runner=current_side_plugins(runner, plugins, repo), echo=echo,
            universe={m: [v.current for v in p.result.verdicts if v.current is not None]
                      for m, p in foreign.items()},
            bench_settings=factor_bench_settings(settings)) if plan else {}
    except EXPECTED_ERRORS as exc:
        echo(f"harness job: speed on {here!r} not judged (baseline recorded on {ref!r}): "
             f"the baseline's commit could not be measured here: {one_line(exc)}; its timing "
             "rows stay TIMING_NOT_COMPARABLE")
        foreign.clear()
        return
    for m, p in foreign.items():
        p.projected = project(p.result, m, measured, settings, reference_model=models[m][0],
                              runner_model=models[m][1])
        p.slow = p.projected.screened
        echo(f"harness job: {m} on {models[m][1]!r} against the {models[m][0]!r} baseline: "
             f"{p.projected.projection.factors_text()}; {len(p.slow)} row(s) beyond the "
             f"{settings.ab_screen:.1%} screen go to A/B")


def ab_confirm(
    run_dir: Path, matrices: list[str], *, baselines: str | Path, arch: str,
    settings: Settings, rounds: int = 3, repo: Path = Path("."),
    runner: BenchRunner = subprocess_runner, echo: Callable[[str], None] = print,
    seconds: dict[str, float] | None = None,
) -> dict[str, int | None]:
    """A/B the failing SLOWER rows and the screened rows of each of ``matrices`` in
    ``run_dir``, each against the commit its baseline row was measured at (the row's
    ``commit``; the baseline's own where the row has none): one ``compare`` per such
    commit, for the rows of all matrices measured at it (one set of bench processes:
    their start-up is most of an A/B's cost). A baseline whose rows share one commit (a
    whole run promoted) gives one compare, as before ``--only-faster`` existed; after
    ``harness baseline accept --only-faster`` its rows may come from several. Per matrix
    its new exit code, or None when there was nothing to confirm or it could not be done
    (said in one line); a matrix whose rows only partly could be measured keeps the
    verdicts of the others.

    A matrix whose baseline is another GPU model's is first projected onto this runner
    (``_project``: the machine factor measured here), its screened rows then confirmed the
    same way. ``seconds`` (optional) receives the wall time of each part ("machine
    factor", "A/B")."""
    out: dict[str, int | None] = dict.fromkeys(matrices)
    todo: dict[str, _Pending] = {}
    models: dict[str, tuple[str, str]] = {}
    for m in matrices:
        pending, gate = _pending(run_dir, m, baselines, arch, settings, echo)
        if pending is not None:
            todo[m] = pending
        if gate.models is not None:
            models[m] = gate.models
    foreign = {m: todo[m] for m in models}
    seconds = {} if seconds is None else seconds
    for stale in (run_dir / "ab").rglob("*.time.json"):   # an earlier job's (--overwrite)
        stale.unlink(missing_ok=True)
    if foreign:
        t0 = time.perf_counter()
        _project(foreign, models, run_dir, settings, repo, runner, echo)
        seconds["machine factor"] = time.perf_counter() - t0
        seconds.update(bench_timeline([run_dir / "ab" / "projection"], "machine factor"))
        todo = {m: p for m, p in todo.items() if m not in models or m in foreign}
    t0 = time.perf_counter()
    groups = commit_groups(todo)
    readings: dict[str, dict] = {}   # matrix -> key -> (its A/B reading, the base sha)
    heads: dict[str, str] = {}
    if groups:
        members = [mv for group in groups.values() for mv in group]
        matrices_ab = list(dict.fromkeys(m for m, _ in members))
        try:
            if _dirty(repo):
                raise ValueError("uncommitted changes under harness/: the measured code is "
                                 "not a commit")
            head = resolve_revision(repo, "HEAD")
            shas = _reachable(repo, groups, echo)
            groups = {c: g for c, g in groups.items() if c in shas}
            if not groups:
                raise ValueError("no baseline commit of these rows is in this repository")
            members = [mv for group in groups.values() for mv in group]
            plugins = tuple(dict.fromkeys(
                str(p) for m in matrices_ab
                for p in read_meta(run_dir / f"{m}.json").extra.get("plugins", ()) or ()))
            universe = [v.current for m in matrices_ab for v in todo[m].result.verdicts
                        if v.current is not None]
            parts = [_part(shas[c], [v for _, v in group], universe)
                     for c, group in groups.items()] if len(groups) > 1 else []
            filt, paths, modes, _, only = selection([v.current for _, v in members], universe)
            outcome = compare(next(iter(shas.values())), head, settings,
                              work_dir=run_dir / "ab" / "+".join(matrices_ab), repo=repo,
                              matrix=",".join(matrices_ab), filter=filt, paths=paths,
                              rows=only, modes=modes, rounds=rounds, confirm=False,
                              runner=current_side_plugins(runner, plugins, repo), echo=echo,
                              a_parts=parts)
        except EXPECTED_ERRORS as exc:
            echo(f"harness job: A/B of {', '.join(matrices_ab)} not done, its verdicts stand: "
                 f"{one_line(exc)}")
        else:
            got = {(v.row.matrix, *v.key): v for v in outcome.result.verdicts}
            for c, group in groups.items():
                for m, v in group:
                    readings.setdefault(m, {})[v.key] = (
                        _reading(m, v, got, outcome.extended), shas[c])
                    heads[m] = head
    seconds["A/B"] = time.perf_counter() - t0
    seconds.update(bench_timeline([d for d in sorted((run_dir / "ab").glob("*"))
                                   if d.is_dir() and d.name != "projection"], "A/B"))
    head = None
    for m, p in todo.items():
        if m in readings or p.projected is not None:
            if m not in heads and head is None:
                head = _head(repo)
            out[m] = _store(run_dir, m, p, readings.get(m, {}), heads.get(m) or head or "",
                            rounds, echo)
    return out


def _head(repo: Path) -> str:
    """HEAD's sha, or "" where git cannot say (the record then names no current commit)."""
    try:
        return resolve_revision(repo, "HEAD")
    except EXPECTED_ERRORS:
        return ""


def _reachable(repo: Path, groups: Mapping, echo: Callable[[str], None]) -> dict[str, str]:
    """Each group's baseline commit resolved (commit -> sha); a commit that cannot be (a
    shallow clone without it) is left out with one line: its rows keep their verdicts,
    the other commits' rows are still measured."""
    shas = {}
    for commit, group in groups.items():
        try:
            shas[commit] = resolve_revision(repo, commit)
        except EXPECTED_ERRORS as exc:
            echo(f"harness job: A/B of the {len(group)} row(s) of baseline commit "
                 f"{commit[:12]} not done, their verdicts stand: {one_line(exc)}")
    return shas


def _part(sha: str, rows: list[RowVerdict], universe: list) -> APart:
    """The A side's part at ``sha``: exactly ``rows`` (their baseline rows' commit)."""
    filt, paths, modes, _, only = selection([v.current for v in rows], universe)
    return APart(sha, frozenset(v.key for v in rows), filt, paths, modes, only)


def row_commit(v: RowVerdict, fallback: str) -> str:
    """The commit a verdict's baseline row was measured at: the row's own ``commit``, or
    ``fallback`` (the baseline environment's) where the row has none ("" or git's null
    id, all zeros, which synthetic rows carry)."""
    commit = v.baseline.commit.strip() if v.baseline is not None else ""
    return commit if commit.strip("0") else fallback


def commit_groups(todo: Mapping[str, _Pending]) -> dict[str, list[tuple[str, RowVerdict]]]:
    """The rows to confirm of each matrix, grouped by the commit of their baseline row
    (``row_commit``; two spellings of one commit, e.g. 12 and 40 hex digits, are one
    group), in the order the matrices and their rows come."""
    groups: dict[str, list[tuple[str, RowVerdict]]] = {}
    for m, p in todo.items():
        for v in p.slow:
            commit = row_commit(v, p.base_commit)
            commit = next((c for c in groups if same_commit(c, commit)), commit)
            groups.setdefault(commit, []).append((m, v))
    return groups


def _reading(matrix: str, v: RowVerdict, got: Mapping, extended: Mapping) -> tuple:
    """(verdict, change, threshold, rounds) of ``v``'s A/B reading in ``got``."""
    r = got.get((matrix, *v.key))
    if r is None:
        return Verdict.MISSING.value, float("nan"), float("nan"), 0
    return r.verdict.value, r.time_change, r.threshold, extended.get(v.key, 0)


def _store(run_dir: Path, matrix: str, pending: _Pending, readings: Mapping, head: str,
           rounds: int, echo: Callable[[str], None]) -> int:
    """Record ``matrix``'s A/B readings with the run and rewrite its gate record
    (``readings``: key -> (verdict, change, threshold, rounds), the baseline commit it was
    measured against). The record's baseline commit is the baseline's own (what a replay
    checks it against, ``record_for``); a row measured against another says so."""
    shas = [sha for _, sha in readings.values()]
    own = next((sha for sha in shas if same_commit(sha, pending.base_commit)), None)
    record_base = own or pending.base_commit or (shas[0] if shas else "")
    rows = tuple(ABRow(*v.key, *readings[v.key][0],
                       "" if readings[v.key][1] == record_base else readings[v.key][1])
                 for v in pending.slow if v.key in readings)
    proj = pending.projected
    if proj is not None:       # another GPU model: the rows inside the screen, projected
        rows += tuple(ABRow(*k, verdict, change, pending.result.settings.ab_screen,
                            source=PROJECTED)
                      for k, (verdict, change) in sorted(proj.readings.items()))
    record = ABRecord(matrix, record_base, head, rounds, rows,
                      projection=proj.projection if proj is not None else None)
    final = apply_ab(pending.result, record)
    csv_path = run_dir / f"{matrix}.csv"
    meta = read_meta(csv_path.with_suffix(".json"))
    write_meta(csv_path.with_suffix(".json"),
               replace(meta, extra={**meta.extra, AB_KEY: record.to_dict()}))
    write_gate_record(csv_path, final, partial=pending.partial)
    echo(f"harness job: {final.notes[-1]}; {matrix} exit {final.exit_code}")
    return final.exit_code


def ab_confirm_matrix(run_dir: Path, matrix: str, **kw) -> int | None:
    """``ab_confirm`` of one matrix: its new exit code, or None."""
    return ab_confirm(run_dir, [matrix], **kw)[matrix]
