"""The CPU acceptance of ``harness bisect`` and ``harness history`` (issue 20), end to end:
``scripts/bisect_acceptance.sh`` builds a throwaway git repository of 8 commits from this
checkout, commit 5 planting the 5% slowdown of the test suite's planted defects
(``tests/planted/slowdown_plugin.py``, on $HARNESS_PLANT_PATH = fp16_cache) through a
``--plugin`` file each commit carries; every bench is a real ``harness bench`` of that
commit's own code in a worktree, timed by the deterministic fake timer
(``tests/planted/fake_timer_plugin.py``). Bisect must name commit 5 measuring at most 4
commits; history, on bisect's runs plus benches of the others, must mark the step there.
The same script, with its GPU defaults, is the H200 acceptance (docs/history.md)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bisect_acceptance.sh"


@pytest.mark.slow     # ~60 s on 2 cores: 10 benches of the real harness in git worktrees
@pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None,
                    reason="needs git and bash")
def test_bisect_and_history_find_the_planted_commit(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the chain is built from this checkout's files")
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_COMMIT"}
    env.update(K="5", MATRIX="smoke", FILTER="M == 16 or M == 32",
               PATHS="fp16_cache,native_int4", MODE="cpu", PYTHON=sys.executable,
               PLUGINS="tests/planted/fake_timer_plugin.py", HARNESS_PLANT_PATH="fp16_cache")
    work = tmp_path / "acceptance"
    proc = subprocess.run(["bash", str(SCRIPT), str(work)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "\nPASS\n" in out, out[-4000:]

    chain = work / "chain"
    shas = subprocess.run(["git", "-C", str(chain), "rev-list", "--reverse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert len(shas) == 8
    planted = shas[5]
    assert "slowdown" in (chain / "bisect_plant.py").read_text()
    summary = json.loads((work / "bisect" / "bisect.json").read_text())
    assert summary["first_bad"] == planted
    assert summary["commits_measured"] <= 4
    hit = next(v for v in summary["visits"] if v["commit"] == planted)
    assert hit["state"] == "regressed" and hit["verdicts"].get("SLOWER") == 2
    ratios = [float(re.search(r" x(\d+\.\d+) ", line).group(1)) for line in hit["evidence"]]
    assert all("fp16_cache" in line for line in hit["evidence"])
    assert ratios and all(abs(r - 1.05) < 0.005 for r in ratios), hit["evidence"]   # 5% planted
    assert all(v["state"] != "regressed" for v in summary["visits"]
               if v["commit"] in shas[:5])

    steps = list(csv.DictReader(open(work / "history" / "history-steps.csv")))
    time_steps = [s for s in steps if s["kind"] == "time"]
    assert [(s["commit"], s["path"], s["verdict"]) for s in time_steps] == [
        (planted, "fp16_cache", "SLOWER")]
    assert float(time_steps[0]["size_median"]) == pytest.approx(0.05, abs=0.005)
    page = (work / "history" / "history.html").read_text()
    assert planted[:10] in page and page.count("<svg") == 2       # fp16_cache and native_int4
    assert "no stored run" not in page                            # all 8 commits measured
    assert "CPU stand-in" in page
