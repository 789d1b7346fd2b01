"""scripts/device_bundle.py: the bundle a device call carries holds one commit's history
(a clone of it checks that commit out and lacks every later one), the baselines' commits
are checked against it, and the carry is summed against the limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from speed_repos import git, speed_repo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import device_bundle  # noqa: E402


def _repo(tmp_path: Path, baseline_commit: str | None = None) -> tuple[Path, list[str]]:
    """Three commits: base, then baselines/sm90/rows.csv naming base (or
    ``baseline_commit``), then a later one with a 1 MB file under docs/data."""
    repo = speed_repo(tmp_path / "repo", "1.00")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "baselines" / "sm90").mkdir(parents=True)
    (repo / "baselines" / "sm90" / "rows.csv").write_text(
        f"case,commit\nM1,{(baseline_commit or base)[:12]}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "baseline")
    measured = git(repo, "rev-parse", "HEAD")
    (repo / "docs" / "data").mkdir(parents=True)
    (repo / "docs" / "data" / "big.bin").write_bytes(b"\0" * 1_000_000)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "later")
    return repo, [base, measured, git(repo, "rev-parse", "HEAD")]


def test_the_bundle_holds_the_commit_and_its_history_only(tmp_path, capsys):
    repo, (base, measured, later) = _repo(tmp_path)
    assert device_bundle.main([measured[:7], "--repo", str(repo), "--carry", ".bundle"]) == 0
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo / ".bundle" / "repo.bundle"), str(clone)],
                   check=True)
    assert git(clone, "rev-parse", "HEAD") == measured
    assert git(clone, "cat-file", "-t", base) == "commit"
    with pytest.raises(subprocess.CalledProcessError):
        git(clone, "cat-file", "-t", later)
    out = capsys.readouterr().out
    assert f"bundle of {measured[:12]}" in out and "carry:" in out


def test_a_baseline_commit_outside_the_history_is_one_line(tmp_path, capsys):
    repo, (_, measured, _) = _repo(tmp_path, baseline_commit="0123456789ab")
    assert device_bundle.main([measured, "--repo", str(repo), "--carry"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"device_bundle: baseline commits not in {measured[:12]}'s history: "
                   "0123456789ab")


def test_the_carry_counts_tracked_files_less_those_left_out(tmp_path, capsys):
    repo, (_, _, later) = _repo(tmp_path)
    sizes = device_bundle.carry_bytes(repo, ["docs/data"], [".whl"])
    assert sizes == {"tracked": sum(p.stat().st_size for p in (repo / "speed.txt",
                     repo / "baselines" / "sm90" / "rows.csv")), ".whl": 0}
    assert device_bundle.carry_bytes(repo, [], [])["tracked"] > 1_000_000
    # over the limit: the data not left out
    assert device_bundle.main([later, "--repo", str(repo), "--leave-out", "--carry",
                               "--limit", "500000"]) == 1
    assert "over the limit of 500000" in capsys.readouterr().err


def test_a_ref_that_is_not_a_commit_is_refused(tmp_path, capsys):
    repo, _ = _repo(tmp_path)
    assert device_bundle.main(["no-such-ref", "--repo", str(repo)]) == 2
    assert capsys.readouterr().err.strip() == (f"device_bundle: 'no-such-ref' is not a commit "
                                               f"of {repo.resolve()}")
