"""Measuring git revisions of this repository: what ``harness compare`` and ``harness
bisect`` share (``harness history`` uses the git helpers only).

* git: ``git``, ``resolve_revision``, ``first_parent`` (the first-parent line, oldest
  first, with subjects), ``is_ancestor``; a missing git executable is ``GitMissing``.
* worktrees: ``worktrees`` (a fixed set, removed on exit) and ``WorktreePool`` (added on
  demand and removed one by one, for a search that does not know its revisions ahead).
* the bench of one revision: ``BenchRequest``, ``bench_command`` and ``subprocess_runner``
  live in ``bench_runner`` (re-exported here), with the pipelined running of several;
  the JIT build cache (``HARNESS_BUILD_DIR``, keyed by the sources' hash) is shared, so
  revisions with the same kernels build once.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cases.filters import FilterError, compile_filter
from ..errors import CompareError
from ..results.schema import ResultRow
from .bench_runner import (  # noqa: F401  (re-exported: the runner's interface lives there)
    BenchRequest,
    BenchRunner,
    bench_command,
    subprocess_runner,
)

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


#: The folders whose code a timing row measures: the paths and their sources, the timers
#: and runner, the case data, the perplexity model. Two commits with the same trees there
#: measure the same code (``same_measured_code``).
MEASURED_CODE = ("harness/kernels", "harness/measure", "harness/cases", "harness/model")


def same_measured_code(repo: Path, commits: Sequence[str]) -> str:
    """The newest of ``commits`` (the one the others lead to; of several tips, the latest
    by commit time) when every one has the same git trees at ``MEASURED_CODE``: their A/A
    runs measured the same code and may make one baseline, named by that commit. A commit
    git cannot resolve, or a folder whose tree differs, is one ``CompareError`` line."""
    shas = [resolve_revision(repo, c) for c in commits]
    for folder in MEASURED_CODE:
        trees = {sha: git(repo, "rev-parse", f"{sha}:{folder}") for sha in shas}
        if len(set(trees.values())) > 1:
            ordered = sorted(trees, key=trees.get)
            a, b = ordered[0], ordered[-1]
            raise CompareError(f"commits {a[:12]} and {b[:12]} differ in {folder}: their "
                               "runs measured different code")
    tips = git(repo, "merge-base", "--independent", *dict.fromkeys(shas)).split()
    return max(tips, key=lambda sha: int(git(repo, "log", "-1", "--format=%ct", sha)))


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
