"""The git bundle a device call carries (``.bundle/repo.bundle``, for
``FROM_BUNDLE=1 REF=<sha> bash scripts/device_calibration.sh``), holding one commit's
history only, and whether the call's carry fits.

A device call carries the working tree's tracked files, plus the ignored paths it names,
64 MiB in all. ``git bundle create --all`` at the newest commit holds every archive ever
committed under docs/data; beside the wheelhouse (``.whl``) it no longer fits. The A/B
and the machine factor need only the commit measured (REF) and the baselines' commits,
which are REF's ancestors; so the bundle is made from a clone with one branch at REF.

    python scripts/device_bundle.py f380eb5               # .bundle/repo.bundle
    python scripts/device_bundle.py HEAD --leave-out docs/data --carry .whl .bundle

Prints the bundle's size, the baseline commits it lacks (of ``baselines/*/*.csv`` at
REF) and the carry: tracked files (less ``--leave-out``, which the call must move away
first) plus each ``--carry`` path, against the limit. Exit 0 when it fits and no
baseline commit is missing; 1 with one line saying which is not so; 2 on bad input.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.engines.revisions import git, resolve_revision
from harness.errors import CompareError

LIMIT = 64 * 1024 * 1024


def make_bundle(repo: Path, ref: str, out: Path) -> str:
    """``out``: a bundle of ``ref``'s history alone (HEAD and ``main`` at it, so a clone
    of it checks ``ref`` out). Returns ``ref``'s full sha; an unknown ``ref`` is one
    ``CompareError`` line."""
    sha = resolve_revision(repo, ref)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        git(repo, "clone", "-q", "--no-checkout", str(repo), str(clone))
        git(clone, "checkout", "-q", "-B", "main", sha)
        git(clone, "bundle", "create", "-q", str(out.resolve()), "HEAD", "main")
    return sha


def baseline_commits(repo: Path, sha: str) -> set[str]:
    """The ``commit`` column's values of every ``baselines/**/*.csv`` at ``sha``."""
    names = git(repo, "ls-tree", "-r", "--name-only", sha, "baselines").splitlines()
    commits = set()
    for name in (n for n in names if n.endswith(".csv")):
        rows = csv.DictReader(io.StringIO(git(repo, "show", f"{sha}:{name}")))
        commits |= {r["commit"] for r in rows if r.get("commit")}
    return commits


def missing_commits(repo: Path, sha: str, commits: set[str]) -> list[str]:
    """Those of ``commits`` that are not ``sha`` or its ancestors (absent from its bundle)."""
    out = []
    for c in sorted(commits):
        ok = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", c, sha],
                            capture_output=True).returncode == 0
        if not ok:
            out.append(c)
    return out


def carry_bytes(repo: Path, leave_out: list[str], carry: list[str]) -> dict[str, int]:
    """Bytes a call carries: the tracked files not under ``leave_out``, and each path of
    ``carry`` (a file or a folder, 0 where absent)."""
    skip = tuple(p.rstrip("/") + "/" for p in leave_out)
    tracked = [n for n in git(repo, "ls-files").splitlines() if not n.startswith(skip)]
    sizes = {"tracked": sum((repo / n).stat().st_size for n in tracked if (repo / n).is_file())}
    for path in carry:
        p = repo / path
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        sizes[path] = sum(f.stat().st_size for f in files)
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref", nargs="?", default="HEAD", help="the commit the call measures")
    ap.add_argument("--repo", type=Path, default=Path("."))
    ap.add_argument("--out", type=Path, default=Path(".bundle/repo.bundle"))
    ap.add_argument("--leave-out", nargs="*", default=["docs/data"])
    ap.add_argument("--carry", nargs="*", default=[".whl", ".bundle"])
    ap.add_argument("--limit", type=int, default=LIMIT, help="bytes a call may carry")
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    try:
        sha = make_bundle(repo, args.ref, args.out if args.out.is_absolute() else repo / args.out)
    except CompareError:
        print(f"device_bundle: {args.ref!r} is not a commit of {repo}", file=sys.stderr)
        return 2
    lacking = missing_commits(repo, sha, baseline_commits(repo, sha))
    sizes = carry_bytes(repo, args.leave_out, args.carry)
    total = sum(sizes.values())
    print(f"bundle of {sha[:12]}: {args.out}")
    for name, n in sizes.items():
        print(f"  {name}: {n / 1e6:.1f} MB")
    print(f"  carry: {total / 1e6:.1f} MB of {args.limit / 1e6:.1f} MB")
    if lacking:
        print(f"device_bundle: baseline commits not in {sha[:12]}'s history: "
              f"{', '.join(c[:12] for c in lacking)}", file=sys.stderr)
        return 1
    if total > args.limit:
        print(f"device_bundle: the carry is {total} bytes, over the limit of {args.limit}; "
              "leave more out (--leave-out) or carry less", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
