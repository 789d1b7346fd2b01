"""Issue 20's acceptance on real H200 data: ``scripts/bisect_acceptance.sh`` ran on an H200
(a chain of 8 commits of this project, the planted 5% fp16_cache slowdown at commit 5),
and its stored runs, the bisect's summary and the steps CSV it wrote are
``tests/fixtures/h200-bisect.tar.gz`` (what and how: tests/fixtures/README.md).

* the bisect named the planted commit, measuring at most 4 commits (GOOD included);
* ``harness history``'s steps, re-detected here from the 8 stored runs with the noise
  margins of the sm90 baselines the chain carried, are exactly one SLOWER time step at
  the planted commit on fp16_cache, and agree with the steps CSV written on the H200
  (the page itself is opened in Chromium in test_html_chromium.py)."""

from __future__ import annotations

from fleet_runs import real_bisect_history as real_history


def test_the_h200_bisect_named_the_planted_commit(tmp_path):
    _, _, line, summary, _ = real_history(tmp_path)
    [planted] = [sha for sha, subject in line if "planted" in subject]
    assert [sha for sha, _ in line].index(planted) == 5 and len(line) == 8
    assert summary["first_bad"] == planted
    assert summary["good"] == line[0][0] and summary["bad"] == line[-1][0]
    assert 1 <= summary["commits_measured"] <= 4
    [visit] = [v for v in summary["visits"] if v["commit"] == planted]
    assert visit["verdicts"].get("SLOWER", 0) >= 1 and visit["evidence"]


def test_history_of_the_h200_runs_shows_one_step_at_the_planted_commit(tmp_path):
    history, steps, line, _, h200_steps = real_history(tmp_path)
    assert history.runs == 8 and len(history.slots) == 8
    [planted] = [sha for sha, subject in line if "planted" in subject]
    assert len(steps) == 1, [(s.kind, s.index, s.path, s.verdict) for s in steps]
    [step] = steps
    assert (step.kind, step.index, step.path, step.mode, str(step.verdict)) == (
        "time", 5, "fp16_cache", "graph", "SLOWER")
    assert all(r.size > 0.05 for r in step.rows)              # each row > +5% at commit 5
    # the same step as the H200's own `harness history` wrote
    [theirs] = h200_steps
    assert (theirs["commit"], theirs["path"], theirs["verdict"], int(theirs["rows"])) == (
        planted, step.path, "SLOWER", len(step.rows))
