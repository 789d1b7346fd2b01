"""Stored runs of a small synthetic fleet, for the tests of ``harness merge``, its HTML page
in Chromium and the CI template: what a CI workflow's final job downloads.

``write_fleet(root)`` writes, the way a bench leaves them (rows, json, the gate record
and its confirmation rows):

* ``root/baselines/sm89`` and ``root/baselines/sm90`` (accepted with ``harness baseline
  accept``), and no baseline for the CPU;
* ``root/fleet/bench-<arch>/results/<commit>/<arch>`` for three machines: an sm89 run on
  host ``lab-a`` where ``marlin_asym`` is 25% slower than its baseline, confirmed by a
  second measurement (exit 1), an sm90 run on ``lab-b`` that passes (exit 0) and a CPU
  run on ``lab-c`` with no baseline (exit 3). The FP16 cache is made the fastest path on
  sm89 and slow on sm90, so the two arches disagree on the winner.

And the real H200 data of tests/fixtures (README there): ``real_fleet`` (two main-job
runs and the baselines they were gated against) and ``real_bisect`` /
``real_bisect_history`` (issue 20's bisect acceptance chain, its 8 stored runs).
"""

from __future__ import annotations

import csv
import json
import shutil
import tarfile
from pathlib import Path

from harness.cli import main
from harness.commands.history import baseline_margins
from harness.config import load_settings
from harness.reports.gate import evaluate
from harness.reports.gate_record import write_gate_record
from harness.reports.history import build_history
from harness.reports.steps import detect_steps
from harness.reports.synthetic import make_rows, resample
from harness.results.catalog import stored_runs
from harness.results.environment import Environment
from harness.results.store import RunMeta, write_run

S = load_settings("default")
COMMIT = "c0ffee" + "0" * 34
SHAPES = ((2048, 2048, 128), (6144, 2048, 2048))
MS = (1, 16, 64)
FACTORS = {"sm89": {"fp16_cache": 0.4}, "sm90": {"fp16_cache": 3.0}}


def env(arch: str, host: str, gpu: str, uuid: str = "") -> Environment:
    """A full environment record of one machine."""
    return Environment(arch=arch, gpu_name=gpu, gpu_uuid=uuid, host=host, driver="580.65",
                       torch="2.13.0", cuda="13.0" if arch != "cpu" else "",
                       quanto="0.2.7", commit=COMMIT, date="2026-12-03T10:00:00+00:00")


ENVS = {
    "sm89": env("sm89", "lab-a", "synthetic L40S", "GPU-89aa0001-0000-0000-0000-000000000000"),
    "sm90": env("sm90", "lab-b", "synthetic H200", "GPU-90bb0002-0000-0000-0000-000000000000"),
    "cpu": env("cpu", "lab-c", "cpu"),
}


def _meta(e: Environment) -> RunMeta:
    return RunMeta(matrix="synthetic", commit=COMMIT, arch=e.arch, environment=e,
                   settings=S.to_dict())


def gpu_rows(arch: str, seed: int):
    """Baseline rows of ``arch`` (its own FP16-cache speed, see ``FACTORS``)."""
    return make_rows(shapes=SHAPES, ms=MS, seed=seed, arch=arch,
                     device=ENVS[arch].gpu_name, commit=COMMIT, slowdown=FACTORS[arch])


def write_baseline(root: Path, arch: str, rows) -> None:
    """Accept ``rows`` as ``root/baselines/<arch>`` the way a user does."""
    write_run(root / "accepted" / arch, rows, _meta(ENVS[arch]))
    assert main(["baseline", "accept", str(root / "accepted" / arch),
                 "--root", str(root / "baselines"), "--yes"]) == 0


def write_bench_run(run_dir: Path, e: Environment, cur, base, fresh=None) -> int:
    """Store ``cur`` and its gate record against ``base`` as a bench does (the
    re-measurement returns ``fresh``); returns the gate's exit code."""
    by_key = {r.key: r for r in (fresh or [])}
    result = evaluate(cur, base, S, remeasure=lambda keys: [by_key[k] for k in keys if k in by_key],
                      current_label=COMMIT[:12], baseline_label="baseline")
    write_run(run_dir, cur, _meta(e))
    write_gate_record(run_dir / "synthetic.csv", result)
    return result.exit_code


def run_dir(root: Path, arch: str, job: str | None = None) -> Path:
    return root / "fleet" / (job or f"bench-{arch}") / "results" / COMMIT / arch


def write_fleet(root: Path) -> dict[str, Path]:
    """The three runs and the baselines described above; returns their directories."""
    root = Path(root)
    base89, base90 = gpu_rows("sm89", 1), gpu_rows("sm90", 4)
    write_baseline(root, "sm89", base89)
    write_baseline(root, "sm90", base90)
    slow = {**FACTORS["sm89"], "marlin_asym": 1.25}
    dirs = {arch: run_dir(root, arch) for arch in ENVS}
    assert write_bench_run(dirs["sm89"], ENVS["sm89"], resample(base89, 2, factor=slow), base89,
                           fresh=resample(base89, 3, factor=slow)) == 1
    assert write_bench_run(dirs["sm90"], ENVS["sm90"],
                           resample(base90, 5, factor=FACTORS["sm90"]), base90) == 0
    cpu = make_rows(shapes=SHAPES, ms=(1, 16), cpu=True, seed=7, commit=COMMIT)
    write_bench_run(dirs["cpu"], ENVS["cpu"], cpu, [])
    return dirs


#: Two real `nox -s bench-sm90` runs from fresh H200s and the sm90 baselines they were
#: gated against (tests/fixtures/README.md).
REAL_FLEET = Path(__file__).parent / "fixtures" / "h200-fleet.tar.gz"
REAL_GPUS = {"962639adcb5d": "1cf82e4e-8fad-06d8-23b0-48c21f35559f",
             "19a4995b2aaf": "d34e78a2-21c1-f493-acc1-2a59bc91184a"}


def real_fleet(root: Path, cpu_run: bool = True) -> dict[str, Path]:
    """Unpack ``REAL_FLEET`` under ``root`` (``root/baselines/sm90``, ``root/fleet/...``),
    add this project's CPU baselines and, with ``cpu_run``, one CPU run of the main job
    made here (``root/fleet/cpu/results/...``). Returns the run directories by commit
    (the CPU one as "cpu")."""
    root = Path(root)
    with tarfile.open(REAL_FLEET) as tar:
        tar.extractall(root, filter="data")
    shutil.copytree(Path(__file__).parents[1] / "baselines" / "cpu", root / "baselines" / "cpu")
    dirs = {c: next((root / "fleet").glob(f"*/results/{c}/sm90")) for c in REAL_GPUS}
    if cpu_run:
        out = root / "fleet" / "cpu" / "results"
        assert main(["job", "--cpu", "--out", str(out), "--baselines", str(root / "baselines"),
                     "--no-progress"]) == 0
        dirs["cpu"] = next(out.glob("*/cpu"))
    return dirs


def unpack_fixture(name: str, root: Path) -> Path:
    """Unpack ``tests/fixtures/<name>`` (a tarball of real device results) under ``root``."""
    with tarfile.open(Path(__file__).parent / "fixtures" / name) as tar:
        tar.extractall(root, filter="data")
    return Path(root)


#: ``scripts/bisect_acceptance.sh`` on an H200 (issue 20): tests/fixtures/README.md.
REAL_BISECT = Path(__file__).parent / "fixtures" / "h200-bisect.tar.gz"


def real_bisect(root: Path) -> tuple[Path, list[tuple[str, str]], dict, list[dict]]:
    """Unpack ``REAL_BISECT`` under ``root``: returns (the results root of the chain's 8
    stored runs, the chain's first-parent line oldest first as (sha, subject), the
    bisect's summary ``bisect.json``, the steps CSV that ``harness history`` wrote on the
    H200, as dicts)."""
    root = Path(root)
    with tarfile.open(REAL_BISECT) as tar:
        tar.extractall(root, filter="data")
    base = root / "h200-bisect"
    line = [tuple(ln.split(" ", 1)) for ln in (base / "chain.txt").read_text().splitlines()]
    with open(base / "h200-history-steps.csv", newline="") as fh:
        steps = list(csv.DictReader(fh))
    return base / "results", line, json.loads((base / "bisect.json").read_text()), steps


def real_bisect_history(tmp_path: Path):
    """(history, steps, line, the bisect summary, the H200's steps) of the real chain."""
    results, line, summary, h200_steps = real_bisect(tmp_path / "bisect")
    fleet = tmp_path / "fleet"
    real_fleet(fleet, cpu_run=False)                # the sm90 baselines the chain carried
    margins, notes = baseline_margins(fleet / "baselines", "sm90", "NVIDIA H200", ["production"])
    assert not notes and margins, notes
    settings = load_settings()
    history = build_history(line, stored_runs(results, "sm90"), arch="sm90", margins=margins,
                            floor=settings.noise_margin_floor)
    return history, detect_steps(history, settings), line, summary, h200_steps
