"""``harness bisect`` with a fake bench runner in a real git repository of 8 commits: the
search names the commit that planted the slowdown (or the accuracy loss) in at most 4
measured commits, re-measures AMBIGUOUS rows (bounded), skips commits whose bench fails,
and says when BAD is not regressed. The end-to-end run through ``harness bench`` is in
test_bisect_acceptance.py."""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import replace

import pytest

from harness.cli import main
from harness.commands.bisect import bisect, report
from harness.config import load_settings
from harness.engines.revisions import BenchRequest
from harness.errors import CompareError
from harness.reports.stats import with_samples
from harness.reports.synthetic import make_rows, resample
from harness.results.environment import Environment
from harness.results.store import RunMeta, write_run


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(tmp_path, k: int, what: str = "speed.txt", value: str = "1.05"):
    """8 commits; commit ``k`` writes ``value`` to ``what`` (1.00 before)."""
    r = tmp_path / f"repo{k}"
    r.mkdir()
    _git(r, "init", "-q")
    _git(r, "config", "user.email", "t@t")
    _git(r, "config", "user.name", "t")
    (r / "speed.txt").write_text("1.00\n")
    (r / "acc.txt").write_text("1.00\n")
    for i in range(8):
        (r / "log.txt").write_text(f"{i}\n")
        if i == k:
            (r / what).write_text(f"{value}\n")
        _git(r, "add", ".")
        _git(r, "commit", "-qm", f"c{i}")
    return r


class FakeBench:
    """Synthetic rows for the commit checked out: marlin's time factor from speed.txt, its
    rel_err factor from acc.txt; ``samples`` per row (2: too few for a test, so moved rows
    are AMBIGUOUS until a re-measurement with 60); ``fail`` commits raise."""

    def __init__(self, samples: int = 40, fail: frozenset[str] = frozenset()):
        self.calls: list[BenchRequest] = []
        self.samples, self.fail = samples, fail
        self.base = make_rows(ms=(1, 16), seed=5, peers=())

    def __call__(self, req: BenchRequest) -> None:
        self.calls.append(req)
        assert _git(req.worktree, "rev-parse", "HEAD") == req.revision
        if req.revision in self.fail:
            raise CompareError(f"bench of {req.revision[:12]} exited 1: build failed")
        speed = float((req.worktree / "speed.txt").read_text())
        acc = float((req.worktree / "acc.txt").read_text())
        rows = resample(self.base, seed=len(self.calls), factor={"marlin_asym": speed})
        n = 60 if req.out_dir.name != "m0" else self.samples  # a re-measurement
        rows = [with_samples(replace(r, commit=req.revision[:12],
                                     rel_err=r.rel_err * (acc if r.path == "marlin_asym" else 1)),
                             r.samples()[:n]) for r in rows]
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=req.revision[:12])
        write_run(req.out_dir / req.revision[:12] / "sm90", rows,
                  RunMeta(matrix="synthetic", commit=req.revision[:12], arch="sm90",
                          environment=env))


def args_for(repo, tmp_path, **kw) -> argparse.Namespace:
    base = dict(repo=str(repo), matrix="synthetic", filter=None, paths=None, mode=None,
                plugin=[], remeasure=2, look_for="speed,accuracy",
                baselines=str(tmp_path / "none"), preset=None, set=[])
    return argparse.Namespace(**{**base, **kw})


def _shas(repo):
    return _git(repo, "rev-list", "--reverse", "HEAD").split()


@pytest.mark.parametrize("k", [1, 3, 4, 6])
def test_bisect_names_the_planted_commit_in_at_most_four_measured_commits(tmp_path, k):
    repo = make_repo(tmp_path, k)
    fake = FakeBench()
    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w",
                 runner=fake, echo=lambda s: None)
    shas = _shas(repo)
    assert out.first_bad is not None and out.first_bad.commit.sha == shas[k]
    assert out.commits_measured <= 4
    hits = out.first_bad.hits
    assert hits and {v.path for v in hits} == {"marlin_asym"}
    assert all(v.remeasured and v.time_change == pytest.approx(0.05, abs=0.01) for v in hits)
    # every judged commit's SLOWER was confirmed by an interleaved GOOD/commit re-measurement
    confirm = [c for c in fake.calls if c.out_dir.name != "m0"]  # the re-measurements
    assert confirm and all(c.paths == ("marlin_asym",) for c in confirm)
    labels = [c.label for c in confirm]
    assert "GOOD" in labels and shas[k][:12] in labels
    assert labels.count("GOOD") * 2 == len(labels)              # in GOOD/commit pairs
    assert _git(repo, "worktree", "list").count("\n") == 0          # worktrees removed
    # the first run of each measured commit is kept as a results root for harness history
    kept = sorted(p.name for p in (tmp_path / "w" / "results").iterdir())
    assert len(kept) == out.commits_measured and shas[k][:12] in kept
    lines: list[str] = []
    assert report(out, tmp_path / "w", echo=lines.append) == 0
    text = "\n".join(lines)
    assert f"first regressed commit: {shas[k]} c{k}" in text
    assert "x1.05" in text and "95% CI" in text and "confirmed by re-measurement" in text
    assert (f"cost: {out.commits_visited} commits visited, {out.commits_measured} measured "
            f"(GOOD and {out.commits_measured - 1} of 7); {out.benches} benches") in text
    summary = json.loads((tmp_path / "w" / "bisect.json").read_text())
    assert summary["first_bad"] == shas[k] and summary["benches"] == out.benches


def test_no_regression_between_good_and_bad(tmp_path):
    repo = make_repo(tmp_path, 3, value="1.00")
    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w",
                 runner=FakeBench(), echo=lambda s: None)
    assert out.first_bad is None and not out.among
    assert [v.state for v in out.visits] == ["reference", "good", "good", "good", "good"]
    lines: list[str] = []
    assert report(out, tmp_path / "w", echo=lines.append) == 1
    assert "is not regressed against GOOD" in lines[0]


def test_ambiguous_rows_are_measured_again_and_boundedly(tmp_path):
    repo = make_repo(tmp_path, 5)
    fake = FakeBench(samples=2)                 # first measurements cannot confirm a move
    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w",
                 runner=fake, echo=lambda s: None)
    assert out.first_bad is not None and out.first_bad.commit.sha == _shas(repo)[5]
    assert all(v.remeasures <= 2 for v in out.visits)
    assert out.first_bad.remeasures >= 1 and all(v.remeasured for v in out.first_bad.hits)
    none = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path, remeasure=0),
                  work_dir=tmp_path / "w0", runner=FakeBench(samples=2), echo=lambda s: None)
    assert none.first_bad is None                # AMBIGUOUS everywhere counts as not regressed
    moved = [v for v in none.visits if v.commit.sha in _shas(repo)[5:]]
    assert moved and all(v.ambiguous and v.state == "good" for v in moved)
    assert not any(v.remeasures for v in none.visits)


def test_an_accuracy_loss_is_found_and_only_when_asked(tmp_path):
    repo = make_repo(tmp_path, 2, what="acc.txt", value="1.5")
    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w",
                 runner=FakeBench(), echo=lambda s: None)
    assert out.first_bad.commit.sha == _shas(repo)[2]
    assert {v.verdict.value for v in out.first_bad.hits} <= {"LESS_ACCURATE", "WORSE_ACCURACY"}
    speed_only = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path, look_for="speed"),
                        work_dir=tmp_path / "w2", runner=FakeBench(), echo=lambda s: None)
    assert speed_only.first_bad is None
    with pytest.raises(CompareError, match="--look-for"):
        bisect("HEAD~7", "HEAD", args_for(repo, tmp_path, look_for="speed,vibes"),
               work_dir=tmp_path / "w3", runner=FakeBench(), echo=lambda s: None)


def test_a_commit_that_does_not_measure_is_skipped(tmp_path):
    repo = make_repo(tmp_path, 4)
    shas = _shas(repo)
    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w",
                 runner=FakeBench(fail=frozenset({shas[5]})), echo=lambda s: None)
    assert out.first_bad.commit.sha == shas[4]
    assert [v.commit.sha for v in out.visits if v.state == "skipped"] == [shas[5]]
    # the planted commit itself fails: the first bad one is among it and its neighbour
    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w4",
                 runner=FakeBench(fail=frozenset({shas[4]})), echo=lambda s: None)
    assert out.first_bad is None and [c.sha for c in out.among] == [shas[4], shas[5]]
    lines: list[str] = []
    assert report(out, tmp_path / "w4", echo=lines.append) == 2
    assert lines[0].startswith("no single answer")


def test_good_must_come_before_bad(tmp_path):
    repo = make_repo(tmp_path, 4)
    with pytest.raises(CompareError, match="not an ancestor"):
        bisect("HEAD", "HEAD~3", args_for(repo, tmp_path), work_dir=tmp_path / "w",
               runner=FakeBench(), echo=lambda s: None)


def test_cli_errors_are_one_line(tmp_path, capsys):
    repo = make_repo(tmp_path, 4)
    assert main(["bisect", "no-such-rev", "HEAD", "--repo", str(repo),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "neither a result path nor a git revision" in err
    assert main(["bisect", "HEAD~1", "HEAD", "--repo", str(repo), "--look-for", "x",
                 "--out", str(tmp_path / "o")]) == 2
    assert "--look-for 'x': choose from speed, accuracy, errors" in capsys.readouterr().err


def test_a_commit_measured_with_other_settings_is_skipped_not_fatal(tmp_path):
    """A commit whose runs the environment policy refuses to compare with GOOD's (here: a
    measured setting changed) cannot be judged: skipped with the reason."""
    repo = make_repo(tmp_path, 4)
    shas = _shas(repo)

    class OtherSettings(FakeBench):
        def __call__(self, req):
            super().__call__(req)
            settings = load_settings().to_dict()
            if req.revision == shas[3]:
                settings["warmup_ms"] = 99.0
            for meta in req.out_dir.rglob("synthetic.json"):
                data = json.loads(meta.read_text())
                meta.write_text(json.dumps({**data, "settings": settings}))

    out = bisect("HEAD~7", "HEAD", args_for(repo, tmp_path), work_dir=tmp_path / "w",
                 runner=OtherSettings(), echo=lambda s: None)
    skipped = [v for v in out.visits if v.state == "skipped"]
    assert [v.commit.sha for v in skipped] == [shas[3]] and "warmup_ms" in skipped[0].problem
    assert out.first_bad is None and [c.sha for c in out.among] == [shas[3], shas[4]]
