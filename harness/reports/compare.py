"""``harness compare A B``: two result sets, or two git revisions measured here.

A side that names an existing CSV/directory is read as stored results. Any other side is
a git revision: it is checked out in a temporary ``git worktree`` and measured by running
``python -m harness bench --matrix M [--filter F] [--paths p,q] [--mode m,n] --out DIR``
inside it (``PYTHONPATH`` = the worktree), for ``rounds`` rounds, alternating the two
revisions (A B, B A, A B, ...) so drift of the GPU hits both alike. The rounds of a side
are pooled (samples concatenated), and their spread calibrates per-case noise margins.
AMBIGUOUS rows get one more interleaved round, restricted to their cases.

Extension point: ``BenchRunner`` — any callable taking a ``BenchRequest`` and leaving
result CSVs under ``request.out_dir``; tests pass a fake one, the default runs the
subprocess above.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import Settings
from .environment import check_environment, measured_settings, warning_lines, with_env_warnings
from .gate import GateResult, evaluate, stored_remeasure
from .schema import ResultRow, SchemaError
from .stats import Key, noise_margins, with_samples
from .store import Run, load_run


class CompareError(ValueError):
    """A comparison that cannot be made (bad revision, failed bench run...)."""


@dataclass(frozen=True)
class BenchRequest:
    """One measurement run of one revision, in its worktree, into ``out_dir``."""

    label: str
    revision: str
    worktree: Path
    out_dir: Path
    matrix: str
    round: int
    filter: str | None = None
    paths: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()


BenchRunner = Callable[[BenchRequest], None]


def bench_command(req: BenchRequest, python: str = sys.executable) -> list[str]:
    """The ``harness bench`` command line for ``req`` (the only interface to the engine)."""
    cmd = [python, "-m", "harness", "bench", "--matrix", req.matrix]
    if req.filter:
        cmd += ["--filter", req.filter]
    if req.paths:
        cmd += ["--paths", ",".join(req.paths)]
    if req.modes:
        cmd += ["--mode", ",".join(req.modes)]
    return cmd + ["--no-compare", "--out", str(req.out_dir)]


def subprocess_runner(req: BenchRequest) -> None:
    """Run ``bench_command(req)`` in the worktree with ``PYTHONPATH`` pointing at it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(req.worktree), env.get("PYTHONPATH", "")) if p)
    req.out_dir.mkdir(parents=True, exist_ok=True)
    log = req.out_dir.parent / f"{req.out_dir.name}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(bench_command(req), cwd=req.worktree, env=env, stdout=fh,
                              stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 and not any(req.out_dir.rglob("*.csv")):
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise CompareError(f"bench of {req.label} ({req.revision[:12]}) round {req.round} exited "
                           f"{proc.returncode}: {tail[0].strip()} (log {log})")


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["git failed"])[-1]
        raise CompareError(f"git {' '.join(args)}: {msg}")
    return proc.stdout.strip()


def resolve_revision(repo: Path, spec: str) -> str:
    """The full sha of ``spec`` (a branch, tag, sha, ``HEAD~1``...) in ``repo``."""
    if spec.startswith("-"):
        raise CompareError(f"{spec!r} is neither a result path nor a git revision")
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
    except CompareError:
        raise CompareError(f"{spec!r} is neither a result path nor a git revision of {repo}") from None


@contextlib.contextmanager
def worktrees(repo: Path, shas: Sequence[str], parent: Path) -> Iterator[dict[str, Path]]:
    """Detached worktrees of ``shas`` under ``parent``; removed again on exit."""
    made: dict[str, Path] = {}
    try:
        for sha in dict.fromkeys(shas):
            path = parent / f"wt-{sha[:12]}"
            _git(repo, "worktree", "add", "--detach", str(path), sha)
            made[sha] = path
        yield made
    finally:
        for path in made.values():
            with contextlib.suppress(CompareError):
                _git(repo, "worktree", "remove", "--force", str(path))
        with contextlib.suppress(CompareError):
            _git(repo, "worktree", "prune")


def pool_rows(runs: Sequence[Sequence[ResultRow]]) -> list[ResultRow]:
    """One row per key from several runs: samples concatenated; a non-ok row wins."""
    by_key: dict[tuple, list[ResultRow]] = defaultdict(list)
    for rows in runs:
        for r in rows:
            by_key[(r.matrix, *r.key)].append(r)
    out = []
    for group in by_key.values():
        bad = [r for r in group if r.status != "ok"]
        if bad or len(group) == 1:
            out.append(bad[0] if bad else group[0])
            continue
        samples = [s for r in group for s in r.samples()]
        out.append(with_samples(group[0], samples) if samples else group[0])
    return out


def _medians(rows: Sequence[ResultRow]) -> dict[Key, float]:
    return {r.key: r.time_us_median for r in rows if r.status == "ok"}


def round_margins(rounds: Sequence[Sequence[ResultRow]], floor: float) -> dict[Key, float]:
    """Noise margins from a side's own rounds (A/A), when there are at least two."""
    return noise_margins([_medians(r) for r in rounds], floor) if len(rounds) >= 2 else {}


def case_filter(rows: Sequence[ResultRow]) -> str:
    """A ``--filter`` expression selecting exactly the cases of ``rows``."""
    terms = sorted({f"(M == {r.M} and N == {r.N} and K == {r.K} and group_size == {r.group_size} "
                    f"and seed == {r.seed} and kind == '{r.kind}')" for r in rows})
    return " or ".join(terms)


def stored_margins(run: Run) -> dict[Key, float]:
    """The noise margins a baseline json carries (``noise_margins``), read as a run."""
    out: dict[Key, float] = {}
    for meta in run.metas.values():
        raw = meta.extra.get("noise_margins") or {}
        for text, value in (raw.items() if isinstance(raw, dict) else ()):
            parts = str(text).split("|")
            if len(parts) == 3 and isinstance(value, (int, float)):
                out[(parts[0], parts[1], parts[2])] = float(value)
    return out


@dataclass(frozen=True)
class Side:
    spec: str
    label: str
    revision: str = ""          # set when measured here
    run: Run | None = None      # set when read from disk


@dataclass(frozen=True)
class CompareOutcome:
    result: GateResult
    a_rows: tuple[ResultRow, ...]
    b_rows: tuple[ResultRow, ...]
    a: Side
    b: Side


def side_settings(run: Run) -> dict:
    """The settings a stored side was measured with (``measured_settings`` of its json);
    {} without one, or when its matrices were measured with different settings."""
    found = [measured_settings(m.settings, m.extra) for m in run.metas.values()]
    return found[0] if found and all(f == found[0] for f in found) else {}


def resolve_side(spec: str, repo: Path) -> Side:
    if Path(spec).exists():
        try:
            run = load_run(spec)
        except SchemaError as exc:
            raise CompareError(str(exc)) from None
        return Side(spec, run.label, run=run)
    sha = resolve_revision(repo, spec)
    return Side(spec, f"{spec}@{sha[:10]}" if spec != sha else sha[:12], revision=sha)


def compare(
    a_spec: str, b_spec: str, settings: Settings, *, work_dir: Path, repo: Path = Path("."),
    matrix: str = "production", filter: str | None = None, paths: Sequence[str] = (),
    modes: Sequence[str] = (), rounds: int = 3, runner: BenchRunner = subprocess_runner,
    echo: Callable[[str], None] = print, strict_env: bool = False,
) -> CompareOutcome:
    """Gate B against A (A is the baseline side). Measured rounds land in ``work_dir/runs``.

    The two sides go through ``environment.check_environment`` (A as the baseline):
    refused sides raise ``IncompatibleBaselineError``; its warnings are echoed and lead
    the result's notes (the report header). Two machines of one GPU model are allowed.
    ``strict_env`` refuses on any warning.
    """
    if rounds < 1:
        raise CompareError(f"--rounds must be >= 1, got {rounds}")
    a, b = resolve_side(a_spec, repo), resolve_side(b_spec, repo)
    measured = [s for s in (a, b) if s.revision]
    rounds_of: dict[str, list[list[ResultRow]]] = {"A": [], "B": []}
    margins: dict[Key, float] = {}
    firsts: dict[str, Run] = {}       # a measured side's first round: its environment and settings

    def run_round(plan, r: int, sub: str, filt: str | None, p: Sequence[str], m: Sequence[str]):
        got = {}
        order = plan if r % 2 == 0 else plan[::-1]
        for label, side, tree in order:
            out = work_dir / "runs" / sub / label
            if out.exists():
                shutil.rmtree(out)
            echo(f"compare: round {sub}, {label} = {side.label}")
            runner(BenchRequest(label, side.revision, tree, out, matrix, r, filt, tuple(p), tuple(m)))
            try:
                got[label] = load_run(out)
            except SchemaError as exc:
                raise CompareError(f"bench of {label} round {sub} left no readable results: {exc}") from None
        return got

    with contextlib.ExitStack() as stack:
        plan = []
        if measured:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-compare-")))
            trees = stack.enter_context(worktrees(repo.resolve(), [s.revision for s in measured], tmp))
            plan = [(lbl, s, trees[s.revision]) for lbl, s in (("A", a), ("B", b)) if s.revision]
            for r in range(rounds):
                for label, run in run_round(plan, r, f"round{r}", filter, paths, modes).items():
                    rounds_of[label].append(list(run.rows))
                    firsts.setdefault(label, run)
            for label in rounds_of:
                for k, v in round_margins(rounds_of[label], settings.noise_margin_floor).items():
                    margins[k] = max(v, margins.get(k, 0.0))
        a_rows = pool_rows(rounds_of["A"]) if a.revision else list(a.run.rows)
        b_rows = pool_rows(rounds_of["B"]) if b.revision else list(b.run.rows)
        run_a = a.run if a.run is not None else firsts["A"]
        run_b = b.run if b.run is not None else firsts["B"]
        env_warnings = check_environment(run_a.environment, run_b.environment, side_settings(run_a),
                                         side_settings(run_b), strict=strict_env,
                                         what=f"A side ({a.label})", current=f"B side ({b.label})")
        for line in warning_lines("harness compare", env_warnings):
            echo(line)

        remeasure = None
        if len(plan) == 2:
            def remeasure(keys: list[Key]):
                wanted = set(keys)
                rows = [r for r in b_rows if r.key in wanted]
                got = run_round(plan, rounds, "remeasure", case_filter(rows),
                                sorted({k[1] for k in keys}), sorted({k[2] for k in keys}))
                return ([r for r in got["A"].rows if r.key in wanted],
                        [r for r in got["B"].rows if r.key in wanted])
        elif b.run is not None:
            # a stored B: replay the confirmations its bench stored (same verdicts as the bench's)
            remeasure = stored_remeasure(b.run.confirmations)
        if a.run is not None:
            # a stored A that is a baseline: its calibrated noise margins apply
            for k, v in stored_margins(a.run).items():
                margins[k] = max(v, margins.get(k, 0.0))

        if len({r.matrix for r in a_rows}) == 1 and len({r.matrix for r in b_rows}) == 1:
            name = b_rows[0].matrix
            a_rows = [replace(r, matrix=name) for r in a_rows]
        result = evaluate(b_rows, a_rows, settings, margins=margins, remeasure=remeasure,
                          baseline_label=f"A: {a.label}", current_label=f"B: {b.label}")
    if margins:
        result = replace(result, notes=result.notes + (
            f"noise margins from {rounds} interleaved rounds per side (A/A spread)",))
    result = with_env_warnings(result, env_warnings)
    return CompareOutcome(result, tuple(a_rows), tuple(b_rows), a, b)
