"""Device calls' runs committed under docs/data, read back on a CPU: unpack an archive
beside a copy of baselines/ without ``models/`` (the arch's reference model's rows alone,
what a foreign job was judged against) and one with the archive's ``baselines-then/``
model folders in place of the committed ones (the model baseline its same-model jobs
were judged against, since re-recorded), and replay a stored run with `harness report`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
#: marlin_asym rows faster at 890e885 than the H200 baseline's commit for them (acffbe3,
#: before gsplit): the five every foreign job since u1 read FASTER
GSPLIT_FASTER = {"M16-N2048-K2048-g128-s0", "M16-N2048-K8192-g128-s0", "M16-N6144-K2048-g128-s0",
                 "M16-N8192-K2048-g128-s0", "M256-N2048-K8192-g128-s0"}


def archive_fixture(name: str, top: str):
    """A module-scoped fixture giving ``docs/data/<name>`` unpacked (``unpack``) as a
    ``Runs``: ``runs(run, file)`` reads ``<top>/<run>/<file>`` as JSON."""
    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        return Runs(unpack(DATA / name, tmp_path_factory.mktemp(top)) / top)
    return fixture


class Runs:
    """The run folders of one unpacked archive (``archive_fixture``)."""

    def __init__(self, top: Path):
        self.top = top

    def __call__(self, run: str, name: str) -> dict:
        return json.loads((self.top / run / name).read_text())


def unpack(archive: Path, where: Path) -> Path:
    """``archive`` unpacked into ``where``, with ``where/reference``: baselines/ less
    ``models/``, and ``where/then``: baselines/ with each model folder of the archive's
    ``*/baselines-then/`` in place of the committed one (baselines/ as it is without)."""
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    shutil.copytree(ROOT / "baselines", where / "reference")
    shutil.rmtree(where / "reference" / "sm90" / "models")
    shutil.copytree(ROOT / "baselines", where / "then")
    for model in where.glob("*/baselines-then/*/models/*"):
        mine = where / "then" / model.parent.parent.name / "models" / model.name
        shutil.rmtree(mine, ignore_errors=True)
        shutil.copytree(model, mine)
    return where


def check_replay(root: Path, run_dir: Path, spec: tuple, out: Path, capsys) -> None:
    """`harness report` of the stored run ``run_dir`` reaches its job's verdicts: ``spec``
    is (judged against the reference model alone, partial, exit code, rows); the
    reference's baselines are ``root / "reference"``, the others ``root / "then"``."""
    reference, partial, code, rows = spec
    base = root / ("reference" if reference else "then")
    capsys.readouterr()
    args = ["report", str(run_dir), "--baseline", str(base), "--out", str(out)]
    assert main(args + (["--partial"] if partial else [])) == code
    assert f"verdicts agree with the bench's stored gate on all {rows} rows" \
        in capsys.readouterr().out


#: the paths whose graph rows gate a job (the peers tinygemm and marlin_fused_zero do not)
GATING_PATHS = ("fp16_cache", "marlin_asym", "native_int4", "native_int4_fused")


def gated_verdicts(runs: Runs, folder: str, matrix: str) -> dict[str, list[str]]:
    """Each gated (graph) row's verdict of ``matrix`` in a stored run, by path."""
    out: dict[str, list[str]] = {}
    for key, verdict in runs(folder, f"{matrix}.json")["gate"]["verdicts"].items():
        _, path, mode = key.split("|")
        if mode == "graph" and path in GATING_PATHS:
            out.setdefault(path, []).append(verdict)
    return out


def check_every_gated_row_judged(runs: Runs, folder: str) -> set[str]:
    """A foreign job of unchanged code (the production and swiglu matrices): every gated
    graph row of each gating path has a speed verdict, SAME or FASTER (none
    TIMING_NOT_COMPARABLE, no false alarm). Returns the production rows its A/B read
    FASTER."""
    paths = ["fp16_cache", "marlin_asym", "native_int4"]
    for matrix, n, gating in (("production", 56, paths),
                              ("swiglu", 14, paths + ["native_int4_fused"])):
        gated = gated_verdicts(runs, folder, matrix)
        assert sorted(gated) == sorted(gating) and all(len(v) == n for v in gated.values())
        assert {v for vs in gated.values() for v in vs} <= {"SAME", "FASTER"}, (matrix, gated)
    rows = runs(folder, "production.json")["ab_confirm"]["rows"]
    return {k for k, v in rows.items() if v["verdict"] == "FASTER"}


def ab_sent(runs: Runs, folder: str) -> set[str]:
    """The rows a foreign job's screen sent to its A/B ("matrix:row"): those of the
    production and swiglu A/B records not read by projection."""
    return {f"{m}:{k}" for m in ("production", "swiglu")
            for k, v in runs(folder, f"{m}.json")["ab_confirm"]["rows"].items()
            if v.get("source") != "projected"}


def failing(runs: Runs, folder: str,
            matrices=("production", "swiglu")) -> dict[tuple[str, str], int]:
    """(matrix, path) -> the number of its gated rows a stored run read other than SAME or
    FASTER."""
    out = {}
    for matrix in matrices:
        for path, verdicts in gated_verdicts(runs, folder, matrix).items():
            bad = [v for v in verdicts if v not in ("SAME", "FASTER")]
            if bad:
                out[(matrix, path)] = len(bad)
    return out


def ab_measured(runs: Runs, folder: str) -> dict[str, dict]:
    """The rows a stored job measured A/B (production and swiglu; not the rows a foreign
    job only projected; none of a matrix without an A/B): key -> its ``ab_confirm``
    reading."""
    return {k: v for m in ("production", "swiglu")
            for k, v in (runs(folder, f"{m}.json").get("ab_confirm") or {})
            .get("rows", {}).items()
            if v.get("source") != "projected"}


def check_job(runs: Runs, folder: str, uuid: str, want: tuple[int, int],
              gpu: str = "NVIDIA H100 80GB HBM3") -> None:
    """A stored job ran on the GPU ``uuid`` names and ended as ``want`` (exit code, whole
    seconds of its time line's total)."""
    env = runs(folder, "production.json")["environment"]
    assert env["gpu_uuid"] == uuid and env["gpu_name"] == gpu
    got = runs(folder, "job.json")
    assert (got["exit_code"], round(got["seconds"]["total"])) == want


def check_factor_job(runs: Runs, folder: str, jobs: dict[str, tuple[str, int, int]],
                     uuids: dict[str, str], minimum: int = 5) -> None:
    """``check_job`` of a stored foreign job from ``jobs`` (folder -> (machine, exit code,
    seconds)) on its machine's GPU (``uuids``), its machine factor's benches at
    ``minimum`` samples a row."""
    machine, code, seconds = jobs[folder]
    check_job(runs, folder, uuids[machine], (code, seconds))
    assert runs(folder, "production.json")["settings"]["projection_min_samples"] == minimum


def ab_bench_times(runs: Runs, folder: str, part: str = "*") -> dict[str, dict]:
    """The time records the A/B's round benches of a stored run left (``SubprocessRunner``:
    started, ready, released, exiting, ended), keyed by their path under ``ab/``; ``part``
    picks one A/B part's folder (a matrix, or matrices joined by ``+``)."""
    ab = runs.top / folder / "ab"
    return {str(f.relative_to(ab)): json.loads(f.read_text())
            for f in sorted(ab.glob(f"{part}/runs/round*/*.time.json"))}


def summary(runs: Runs, folder: str, *args: str) -> str:
    """What scripts/acceptance_summary.py prints of one stored run (``args``: its options,
    e.g. ``"--plant", "fp16_cache"``)."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "acceptance_summary.py"),
                           str(runs.top / folder), *args], capture_output=True, text=True,
                          check=True).stdout


def check_ab_benches_own_rows(runs: Runs, folder: str, benches: int, rows: int) -> None:
    """The A/B of a stored run timed ``rows`` rows in ``benches`` benches, and none of them
    outside the rows its row files asked for (the fix of 4a92d54)."""
    said = summary(runs, folder)
    want = f"A/B benches: {benches}, {rows} rows timed, 0 of them not in their row files"
    assert want in said, said      # a helper module: pytest does not rewrite this assert
