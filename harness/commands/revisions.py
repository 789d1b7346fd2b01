"""Measuring git revisions of this repository: what ``harness compare`` and ``harness
bisect`` share (``harness history`` uses the git helpers only).

* git: ``git``, ``resolve_revision``, ``first_parent`` (the first-parent line, oldest
  first, with subjects), ``is_ancestor``; a missing git executable is ``GitMissing``.
* worktrees: ``worktrees`` (a fixed set, removed on exit) and ``WorktreePool`` (added on
  demand and removed one by one, for a search that does not know its revisions ahead).
* the bench of one revision: ``BenchRequest`` and ``bench_command`` (the command line of
  ``python -m harness bench`` in the worktree, the only interface to the engine) and
  ``subprocess_runner``, which runs it there with ``PYTHONPATH`` = the worktree, so each
  revision is measured by its own code; the JIT build cache (``HARNESS_BUILD_DIR``, keyed
  by the sources' hash) is shared, so revisions with the same kernels build once.

Extension point: ``BenchRunner``, any callable taking a ``BenchRequest`` and leaving a
result directory under ``request.out_dir``; tests pass a fake one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..cases.filters import FilterError, compile_filter
from ..errors import CompareError
from ..results.schema import ResultRow


@dataclass(frozen=True)
class BenchRequest:
    """One measurement run of one revision, in its worktree, into ``out_dir``.

    ``plugins`` are passed to the bench as ``--plugin``: a relative path is read from the
    revision's own checkout (a file that differs between commits plants what they do).
    """

    label: str
    revision: str
    worktree: Path
    out_dir: Path
    matrix: str
    round: int
    filter: str | None = None
    paths: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()


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
    for plugin in req.plugins:
        cmd += ["--plugin", plugin]
    return cmd + ["--no-compare", "--out", str(req.out_dir)]


def subprocess_runner(req: BenchRequest) -> None:
    """Run ``bench_command(req)`` in the worktree with ``PYTHONPATH`` pointing at it.

    ``HARNESS_COMMIT`` is dropped from the bench's environment: the worktree is a git
    checkout, and every revision must record its own commit. A relative ``out_dir`` is
    taken from this process's directory."""
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_COMMIT"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(req.worktree), env.get("PYTHONPATH", "")) if p)
    # the bench runs in the worktree: a relative --out (compare's default, the job's
    # results/) would land there, where the caller never looks
    req = replace(req, out_dir=req.out_dir.resolve())
    req.out_dir.mkdir(parents=True, exist_ok=True)
    log = req.out_dir.parent / f"{req.out_dir.name}.log"
    with open(log, "w") as fh:
        proc = subprocess.run(bench_command(req), cwd=req.worktree, env=env, stdout=fh,
                              stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0 and not any(req.out_dir.rglob("*.csv")):
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        tail = lines[-1:] or ["no output"]
        raise CompareError(f"bench of {req.label} ({req.revision[:12]}) round {req.round} exited "
                           f"{proc.returncode}: {tail[0].strip()} (log {log})")


_CASE_FIELDS = ("N", "K", "group_size", "seed", "kind")


def _term(name: str, value) -> str:
    return f"{name} == {value!r}" if isinstance(value, str) else f"{name} == {value}"


def _grouped(cases: set[tuple], fields: Sequence[str], with_m: bool) -> str:
    """One ``or`` term per distinct value of ``fields``, each with its M values."""
    groups: dict[tuple, set[int]] = {}
    for case in cases:
        groups.setdefault(case[1:], set()).add(case[0])
    idx = [_CASE_FIELDS.index(f) for f in fields]
    coarse: dict[tuple, set[int]] = {}
    for rest, ms in groups.items():
        coarse.setdefault(tuple(rest[i] for i in idx), set()).update(ms)
    terms = []
    for values, ms in sorted(coarse.items(), key=repr):
        parts = [_term(f, v) for f, v in zip(fields, values, strict=True)]
        if with_m:
            parts.append("(" + " or ".join(f"M == {m}" for m in sorted(ms)) + ")")
        terms.append("(" + " and ".join(parts) + ")" if parts else "")
    return "" if any(t == "" for t in terms) else " or ".join(terms)


def _fits(text: str) -> bool:
    try:
        compile_filter(text)
    except FilterError:
        return False
    return True


def case_filter(rows: Sequence[ResultRow], universe: Sequence[ResultRow] = ()) -> str:
    """A ``--filter`` expression selecting the cases of ``rows``: exactly them when that
    fits the filter's limits (its characters and syntax nodes), else the smallest of a few
    coarser supersets (every M of their shapes; then the whole matrix, ""). A caller keeps
    only the rows it asked for, so a superset costs time, never a verdict. ``universe``
    (the rows the cases come from, e.g. the stored run) lets a field that never varies
    there be left out, and selecting all of its cases become ""."""
    def ident(r: ResultRow) -> tuple:
        return (r.M, *(getattr(r, f) for f in _CASE_FIELDS))
    cases = {ident(r) for r in rows}
    every = cases | {ident(r) for r in universe}
    if universe and cases == every:
        return ""
    varying = [f for i, f in enumerate(_CASE_FIELDS, 1)
               if len({c[i] for c in every}) > 1 or not universe]
    shape = [f for f in varying if f in ("N", "K")]
    for text in (_grouped(cases, varying, True), _grouped(cases, shape, True),
                 _grouped(cases, shape, False)):
        if _fits(text):
            return text
    return ""


# ------------------------------------------------------------------------------------ git
class GitMissing(CompareError):
    """No git executable: revisions cannot be resolved or checked out (one line)."""


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s stdout, stripped; a failure is one ``CompareError`` line."""
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=False)
    except FileNotFoundError:
        raise GitMissing("git is not installed (or not on PATH): comparing git revisions "
                         "needs it; stored result directories compare without it") from None
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["git failed"])[-1]
        raise CompareError(f"git {' '.join(args)}: {msg}")
    return proc.stdout.strip()


def resolve_revision(repo: Path, spec: str) -> str:
    """The full sha of ``spec`` (a branch, tag, sha, ``HEAD~1``...) in ``repo``."""
    if spec.startswith("-"):
        raise CompareError(f"{spec!r} is neither a result path nor a git revision")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
    except GitMissing:
        raise
    except CompareError:
        raise CompareError(
            f"{spec!r} is neither a result path nor a git revision of {repo}") from None


@dataclass(frozen=True)
class Commit:
    """One commit of a first-parent line."""

    sha: str
    subject: str = ""


def first_parent(repo: Path, rev: str, *, since: str | None = None,
                 last: int | None = None) -> list[Commit]:
    """The first-parent line ending at ``rev``, oldest first: ``git rev-list --first-parent``
    (``since``: only commits after it, ``since..rev``; ``last``: at most that many, the
    newest)."""
    spec = f"{since}..{rev}" if since else rev
    args = ["log", "--first-parent", "--format=%H%x1f%s"]
    if last is not None:
        args.append(f"--max-count={int(last)}")
    out = git(repo, *args, spec, "--")
    commits = [Commit(*(line.split("\x1f", 1) + [""])[:2]) for line in out.splitlines() if line]
    return commits[::-1]


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """Whether ``older`` is an ancestor of (or equal to) ``newer``."""
    try:
        git(repo, "merge-base", "--is-ancestor", older, newer)
    except GitMissing:
        raise
    except CompareError:
        return False
    return True


# ------------------------------------------------------------------------------ worktrees
@contextlib.contextmanager
def worktrees(repo: Path, shas: Sequence[str], parent: Path) -> Iterator[dict[str, Path]]:
    """Detached worktrees of ``shas`` under ``parent``; removed again on exit."""
    with WorktreePool(repo, parent) as pool:
        yield {sha: pool.add(sha) for sha in dict.fromkeys(shas)}


class WorktreePool:
    """Detached worktrees of ``repo`` under ``parent``, added on demand (``add``), removed
    one by one (``remove``) or all on exit (a context manager)."""

    def __init__(self, repo: Path, parent: Path) -> None:
        self.repo, self.parent = repo, parent
        self.made: dict[str, Path] = {}

    def add(self, sha: str) -> Path:
        """The worktree of ``sha`` (made once)."""
        if sha not in self.made:
            path = self.parent / f"wt-{sha[:12]}"
            git(self.repo, "worktree", "add", "--detach", str(path), sha)
            self.made[sha] = path
        return self.made[sha]

    def remove(self, sha: str) -> None:
        """Remove the worktree of ``sha`` (if there is one)."""
        path = self.made.pop(sha, None)
        if path is not None:
            with contextlib.suppress(CompareError):
                git(self.repo, "worktree", "remove", "--force", str(path))

    def __enter__(self) -> WorktreePool:
        return self

    def __exit__(self, *exc) -> None:
        for sha in list(self.made):
            self.remove(sha)
        with contextlib.suppress(CompareError):
            git(self.repo, "worktree", "prune")
