"""A kernel author's first hour, end to end (issue 38), from a fresh copy of
examples/plugins/: install the package, see its paths in `harness paths`, bench one with no
--plugin, accept its baseline rows, then break it the ways a kernel breaks (its zero point
dropped: WORSE_ACCURACY; sixteen times the matmul: SLOWER with CPU speed gated), a filter that
matches nothing, and a plugin that does not import. Every harness call is its own process,
as on the author's shell (the installed package's paths never leak into other tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The smoke matrix on the CPU, its three GEMM cases of M < 20: fast, and rows to gate.
FILTER = "M < 20 and kind == 'gemm'"
BENCH = ["bench", "--cpu", "--matrix", "smoke", "--filter", FILTER, "--no-progress"]


@pytest.fixture(scope="module")
def author(tmp_path_factory):
    """The package installed (pip, no build isolation: setuptools from this venv) into its
    own site folder, and a copy of the committed CPU baselines to accept rows into."""
    tmp = tmp_path_factory.mktemp("first-hour")
    pkg = tmp / "my-kernels"
    shutil.copytree(ROOT / "examples" / "plugins", pkg)
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(pkg)], check=True,
                   capture_output=True, text=True)
    shutil.copytree(ROOT / "baselines" / "cpu", tmp / "baselines" / "cpu")
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_NO_ENTRY_POINTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return tmp, site, env


def harness(author, *args: str) -> subprocess.CompletedProcess:
    tmp, _, env = author
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=600)


def _run_dir(out: Path) -> Path:
    [run] = list(out.glob("*/cpu"))
    return run


def _verdicts(run: Path, path: str) -> set[str]:
    gate = pd.read_json(run / "smoke.json", typ="series")["gate"]["verdicts"]
    return {v for k, v in gate.items() if k.split("|")[1] == path}


def _edit(site: Path, old: str, new: str) -> str:
    src = site / "int4_example" / "torch_dequant.py"
    text = src.read_text()
    assert old in text
    src.write_text(text.replace(old, new))
    return text


@pytest.mark.slow     # ~10 harness processes on the CPU, 1-2 minutes on 2 cores
def test_the_first_hour(author):
    tmp, site, _ = author
    base = ["--baselines", str(tmp / "baselines")]
    # 1. installed: listed with where it came from, no --plugin anywhere below
    listed = harness(author, "paths", "--cpu")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "torch_dequant" in line)
    assert "entry point int4_example" in listed.stdout and "available" in row
    assert "triton_int4" in listed.stdout          # listed, and says why it cannot run here
    # 2. bench it: its rows are NEW (no baseline rows yet), the run passes
    first = harness(author, *BENCH, "--paths", "torch_dequant", "--out", str(tmp / "r1"), *base)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    run1 = _run_dir(tmp / "r1")
    assert _verdicts(run1, "torch_dequant") == {"NEW"}
    # 3. accept its rows into the baseline, every other row kept as it was
    before = pd.read_csv(tmp / "baselines" / "cpu" / "smoke.csv")
    acc = harness(author, "baseline", "accept", str(run1), "--paths", "torch_dequant",
                  "--root", str(tmp / "baselines"), "--yes")
    assert acc.returncode == 0, acc.stdout + acc.stderr
    after = pd.read_csv(tmp / "baselines" / "cpu" / "smoke.csv")
    assert set(after.path) == set(before.path) | {"torch_dequant"}
    assert len(after) == len(before) + (after.path == "torch_dequant").sum()
    again = harness(author, *BENCH, "--paths", "torch_dequant", "--out", str(tmp / "r2"), *base)
    assert again.returncode == 0, again.stdout[-2000:]      # CPU speed: information
    assert _verdicts(_run_dir(tmp / "r2"), "torch_dequant") <= {"SAME", "SLOWER", "FASTER",
                                                               "AMBIGUOUS"}
    # 4. the zero point dropped: WORSE_ACCURACY (not an ERROR of the re-check), exit 1
    original = _edit(site, ' + s["zero"][:, None, :]', "")
    try:
        wrong = harness(author, *BENCH, "--paths", "torch_dequant", "--out", str(tmp / "r3"),
                        *base)
    finally:
        (site / "int4_example" / "torch_dequant.py").write_text(original)
    assert wrong.returncode == 1, wrong.stdout[-2000:]
    assert _verdicts(_run_dir(tmp / "r3"), "torch_dequant") == {"WORSE_ACCURACY"}
    # 5. sixteen times the matmul: SLOWER once CPU speed gates (--set gate_eager_speed=1),
    # exit 1. Twice the matmul read only 1.19x at M1-N256-K256 on a 2-core CI machine
    # (2026-12-06), where the call's fixed cost is most of its 70 us, so four times reads
    # ~1.6x there: less than the 2.5x the other test worker's load moved a CPU row between
    # two benches a few seconds apart (CI, stop 65). Sixteen times reads ~3.9x at worst
    _edit(site, "        torch.matmul(A, W, out=out)\n",
          "        torch.matmul(A, W, out=out)\n" * 16)
    try:
        slow = harness(author, *BENCH, "--paths", "torch_dequant", "--out", str(tmp / "r4"),
                       "--set", "gate_eager_speed=1", *base)
    finally:
        (site / "int4_example" / "torch_dequant.py").write_text(original)
    assert slow.returncode == 1, slow.stdout[-2000:]
    assert _verdicts(_run_dir(tmp / "r4"), "torch_dequant") == {"SLOWER"}
    # ... by the planted work, not by the few percent two CPU processes differ by
    times = [pd.read_csv(_run_dir(tmp / r) / "smoke.csv").set_index("case_id").time_us_median
             for r in ("r1", "r4")]
    assert (times[1] / times[0]).min() > 1.2
    # 6. a filter that matches nothing: exit 2, one line naming it
    none = harness(author, *[a if a != FILTER else "M == 7" for a in BENCH], "--paths",
                   "torch_dequant", "--out", str(tmp / "r5"), *base)
    assert none.returncode == 2 and none.stderr.strip().count("\n") == 0
    assert "selects no case of matrix 'smoke'" in none.stderr
    # 7. a plugin that does not import: exit 2, one line naming the entry point
    paths_py = site / "int4_example" / "paths.py"
    good = paths_py.read_text()
    paths_py.write_text(good + "\ndef broken(:\n")
    try:
        broken = harness(author, *BENCH, "--out", str(tmp / "r6"), *base)
    finally:
        paths_py.write_text(good)
    assert broken.returncode == 2, broken.stdout[-1000:]
    err = broken.stderr.strip()
    assert err.count("\n") == 0 and "entry point int4_example" in err and "SyntaxError" in err
