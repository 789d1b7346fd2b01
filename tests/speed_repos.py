"""Small git repositories whose commits differ by a ``speed.txt``, for the tests of
``harness compare`` on revisions: a fake bench reads the file in each worktree, so the
two revisions really measure differently.

``git(repo, *args)`` runs git there and returns its stdout; ``speed_repo(path, *speeds)``
makes one commit per speed (the first is the base, HEAD is the last).
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def speed_repo(path: Path, *speeds: str) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    git(path, "config", "user.email", "t@t")
    git(path, "config", "user.name", "t")
    for i, speed in enumerate(speeds):
        (path / "speed.txt").write_text(speed + "\n")
        git(path, "add", ".")
        git(path, "commit", "-qm", f"speed {speed} ({i})", "--allow-empty")
    return path
