"""Other commits' extension builds, started in a thread while the bench measures.

``harness job``'s A/B measures flagged rows against the commit each baseline row was
measured at, in a git worktree of that commit, whose bench loads (or compiles) that
commit's extension. On a fresh machine each such compile is 25-30 s, paid by the A/B's
first bench of that commit, after the bench: the committed sm90 baselines name two
commits, so about 55 s of a fresh H200's job. ``start`` compiles them in the background
as soon as the job starts (``harness build --arch`` of each commit in a temporary
worktree, into the shared build cache, one after the other, at the lowest CPU priority,
so the bench's timing, device-side, keeps its cores); the job waits for it before the A/B.
A commit already built costs a cache look-up; a commit that cannot be checked out (a
shallow clone) or built is skipped with a line in the log: the A/B then says why itself.

Extension point: none (the A/B's own worktrees and benches are ``engines.revisions``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


@dataclass
class Prebuild:
    """The background builds of ``shas``; ``wait()`` joins them."""

    shas: tuple[str, ...]
    log_path: Path
    thread: threading.Thread | None = None
    lines: list[str] = field(default_factory=list)

    def wait(self) -> float:
        """Block until every build ended; the seconds waited (0 when they were done)."""
        if self.thread is None:
            return 0.0
        t0 = time.perf_counter()
        self.thread.join()
        return time.perf_counter() - t0

    def _run(self, repo: Path, arch: str, work: Path) -> None:
        nice = ["nice", "-n", "19"] if shutil.which("nice") else []
        with self.log_path.open("a", encoding="utf-8") as log:
            for sha in self.shas:
                tree = work / sha[:12]
                added = _git(repo, "worktree", "add", "--detach", "--force", str(tree), sha)
                if added.returncode != 0:
                    self.lines.append(f"{sha[:12]}: not checked out ({added.stderr.strip()})")
                    continue
                t0 = time.perf_counter()
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                    p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)}
                done = subprocess.run([*nice, sys.executable, "-m", "harness", "build",
                                       "--arch", arch], cwd=tree, env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
                self.lines.append(f"{sha[:12]}: harness build --arch {arch} exit "
                                  f"{done.returncode} in {time.perf_counter() - t0:.1f} s")
                _git(repo, "worktree", "remove", "--force", str(tree))


def start(repo: Path, shas: Sequence[str], arch: str, work: Path) -> Prebuild:
    """Build ``shas``' extensions for ``arch`` in a thread (worktrees under ``work``); the
    commits that are HEAD itself are left out (the bench builds HEAD)."""
    head = _git(repo, "rev-parse", "HEAD").stdout.strip()
    wanted = []
    for sha in dict.fromkeys(s for s in shas if s):
        full = _git(repo, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}").stdout.strip()
        if full and full != head:
            wanted.append(full)
    work.mkdir(parents=True, exist_ok=True)
    pre = Prebuild(tuple(wanted), work / "prebuild.log")
    if wanted:
        # not a daemon: an early exit waits for the compile (torch's build lock stays sane)
        pre.thread = threading.Thread(target=pre._run, args=(repo, arch, work),
                                      name="harness-prebuild", daemon=False)
        pre.thread.start()
    return pre
