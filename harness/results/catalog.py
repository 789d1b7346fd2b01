"""The stored runs of one arch under a results root, found by directory.

``harness bench`` stores a run in ``<root>/<commit>/<arch>/`` (``<commit>`` the short sha,
with ``-dirty`` when the checkout had uncommitted changes; ``--repeat`` adds
``<arch>.rep<k>``). ``stored_runs(root, arch)`` lists every such directory that holds a
result CSV, each read (or the one-line reason it could not be); ``archs(root)`` lists the
arches present. Directories that are not a commit (``compare/``, ``bisect/``,
``history/``) are left alone. Torch-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .schema import SchemaError
from .store import Run, load_run

#: A commit directory's name: a short or full sha, ``-dirty`` when the checkout had changes.
COMMIT_DIR = re.compile(r"^(?P<sha>[0-9a-f]{7,40})(?P<dirty>-dirty)?$")
_REP = re.compile(r"^(?P<arch>[A-Za-z0-9_+-]+?)(?:\.rep(?P<rep>\d+))?$")


@dataclass(frozen=True)
class StoredRun:
    """One stored run directory: its commit (as named on disk), its label, what it holds."""

    commit: str                 # the short sha of the directory name, without -dirty
    dirty: bool                 # measured on a checkout with uncommitted changes
    label: str                  # the arch directory's name: sm90, sm90.rep2
    path: Path
    run: Run | None             # None: unreadable (``problem`` says why)
    problem: str = ""

    @property
    def name(self) -> str:
        """How reports name the run: its directory, ``dirty`` marked."""
        return f"{self.label} (dirty)" if self.dirty else self.label


def _has_csv(directory: Path) -> bool:
    return any(p.suffix == ".csv" and not p.name.startswith(".") for p in directory.iterdir())


def archs(root: str | Path) -> list[str]:
    """The arches with a stored run under ``root`` (``.rep<k>`` folded into their arch)."""
    root = Path(root)
    found: set[str] = set()
    for commit_dir in _commit_dirs(root):
        for sub in commit_dir.iterdir():
            m = _REP.match(sub.name)
            if m and sub.is_dir() and _has_csv(sub):
                found.add(m["arch"])
    return sorted(found)


def _commit_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if d.is_dir() and COMMIT_DIR.match(d.name))


def stored_runs(root: str | Path, arch: str) -> list[StoredRun]:
    """Every run of ``arch`` under ``root`` (``<commit>/<arch>`` and ``<commit>/<arch>.rep<k>``),
    by commit directory then label; a run that does not read carries the reason."""
    out: list[StoredRun] = []
    for commit_dir in _commit_dirs(Path(root)):
        m = COMMIT_DIR.match(commit_dir.name)
        for sub in sorted(commit_dir.iterdir(), key=lambda p: _rep_order(p.name)):
            rep = _REP.match(sub.name)
            if not (rep and rep["arch"] == arch and sub.is_dir() and _has_csv(sub)):
                continue
            try:
                run, problem = load_run(sub), ""
            except SchemaError as exc:
                run, problem = None, str(exc)
            out.append(StoredRun(m["sha"], bool(m["dirty"]), sub.name, sub, run, problem))
    return out


def _rep_order(name: str) -> tuple[int, str]:
    m = _REP.match(name)
    return (int(m["rep"]) if m and m["rep"] else 1, name)
