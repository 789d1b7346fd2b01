"""`harness merge`: runs of several machines and arches in one report (CSV, HTML, Markdown),
a section per arch, one summary table, one exit code, each machine's environment, and the
winners of each arch side by side. The runs are those of ``tests/fleet_runs.py``: sm89
regressed (exit 1), sm90 passed (exit 0), the CPU has no baseline (exit 3)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from fleet_runs import COMMIT, ENVS, gpu_rows, run_dir, write_bench_run, write_fleet

from harness.cli import main
from harness.commands.merge import find_runs
from harness.errors import EXIT_ERROR, EXIT_FAIL, EXIT_NO_BASELINE
from harness.reports.fleet import label_runs
from harness.reports.synthetic import resample
from harness.results.environment import Environment


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    dirs = write_fleet(root)
    return root, dirs


def _merge(root: Path, out: Path, *extra: str) -> int:
    return main(["merge", str(root / "fleet"), "--out", str(out), *extra])


def _md_table(text: str, header_start: str) -> pd.DataFrame:
    """The Markdown table whose header row starts with ``header_start``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return pd.DataFrame(rows[2:], columns=rows[0])


def test_three_machines_merged_with_baselines(fleet, tmp_path, capsys, monkeypatch):
    root, dirs = fleet
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    out = tmp_path / "merged"
    assert _merge(root, out, "--baseline", str(root / "baselines")) == EXIT_FAIL   # worst: 1
    printed = capsys.readouterr().out
    assert "exit 1 (a failing verdict): the worst of the runs' (cpu @ lab-c 3, " \
           "sm89 @ lab-a 1, sm90 @ lab-b 0)" in printed
    # each run is gated as `harness report` gates it: the stored verdicts are reproduced
    assert printed.count("verdicts agree with the bench's stored gate on all") == 3

    # merged.csv: every row of every run, with arch and machine columns
    csv = pd.read_csv(out / "merged.csv")
    assert list(csv.columns[:4]) == ["run", "arch", "machine", "run_exit"]
    assert csv.groupby("arch").size().to_dict() == {"cpu": 20, "sm89": 30, "sm90": 30}
    assert csv.groupby("machine")["run_exit"].first().to_dict() == {
        "lab-a": 1, "lab-b": 0, "lab-c": 3}
    slow = csv[(csv.verdict == "SLOWER")]
    assert set(slow.arch) == {"sm89"} and set(slow.path) == {"marlin_asym"} and len(slow) == 6
    assert slow.fails.all() and not csv[csv.arch != "sm89"].fails.any()

    # summary.md: the exit line, the summary table (arch x path x verdict counts)
    md = (out / "summary.md").read_text()
    assert md.startswith("### INT4 GEMM fleet: ❌ exit 1 (a failing verdict)")
    table = _md_table(md, "| arch | GPU model | run | path |")
    counts = {(r.arch, r.path): r for r in table.itertuples()}
    assert len(table) == 15                             # 3 runs x 5 paths (3 paths, 2 peers)
    marlin89 = counts[("sm89", "marlin_asym")]
    assert (marlin89.SLOWER, marlin89.SAME, marlin89.failing, marlin89.exit) == ("6", "0", "6", "1")
    assert all(counts[("sm90", p)].SAME == "6" and counts[("sm90", p)].failing == "0"
               for p in ("native_int4", "fp16_cache", "marlin_asym", "tinygemm"))
    assert all(counts[("cpu", p)].NEW == "4" and counts[("cpu", p)].exit == "3"
               for p in ("native_int4", "fp16_cache"))
    # a section per arch, each run's reason and its failing rows
    assert [m for m in re.findall(r"^#### (\S+)$", md, re.M)] == ["cpu", "sm89", "sm90"]
    assert "**sm89 @ lab-a**: exit 1: failing verdicts: 6 SLOWER" in md
    assert "**cpu @ lab-c**: exit 3: no baseline for synthetic" in md
    assert md.count("🐢 SLOWER") == 6
    # the header names every machine's environment
    machines = _md_table(md, "| run | arch | GPU | GPU uuid |").set_index("run")
    assert machines.loc["sm89 @ lab-a", "GPU uuid"] == ENVS["sm89"].gpu_uuid
    assert machines.loc["sm90 @ lab-b", "GPU"] == "synthetic H200"
    for col, value in (("host", "lab-c"), ("driver", "580.65"), ("torch", "2.13.0"),
                       ("optimum-quanto", "0.2.7"), ("commit", COMMIT),
                       ("date", "2026-12-03T10:00:00+00:00")):
        assert machines.loc["cpu @ lab-c", col] == value
    assert machines.loc["sm90 @ lab-b", "CUDA"] == "13.0"
    # which path wins where, side by side: the FP16 cache wins on sm89 and loses on sm90
    rules = _md_table(md, "| shape |").set_index("shape")
    assert list(rules.columns) == ["sm89 @ lab-a", "sm90 @ lab-b"]          # no CPU column
    row = rules.loc["N=2048 K=2048 g128 [graph]"]
    assert "fp16_cache" in row["sm89 @ lab-a"] and "fp16_cache" not in row["sm90 @ lab-b"]
    assert "disagree on the winner at 6 of 6" in md and "Left out of the winners: cpu" in md
    assert step_summary.read_text() == md + "\n"

    # index.html: self-contained, a section per arch, the machines, the winners
    page = (out / "index.html").read_text()
    for arch in ("cpu", "sm89", "sm90"):
        assert f'<section class="arch" id="arch-{arch}">' in page
    assert 'id="fleet-status">exit 1 (a failing verdict)' in page
    for env in ENVS.values():
        assert env.host in page and (env.gpu_uuid or env.host) in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)


def test_without_a_baseline_the_stored_gate_records_decide(fleet, tmp_path, capsys):
    root, dirs = fleet
    assert _merge(root, tmp_path / "m") == EXIT_FAIL
    printed = capsys.readouterr().out
    assert printed.count("stored gate record") == 3
    csv = pd.read_csv(tmp_path / "m" / "merged.csv")
    assert csv.groupby("arch")["run_exit"].first().to_dict() == {"cpu": 3, "sm89": 1, "sm90": 0}
    slow = csv[csv.verdict == "SLOWER"]
    assert len(slow) == 6 and slow.fails.all() and set(slow.arch) == {"sm89"}


def test_two_machines_of_one_arch_are_both_shown(fleet, tmp_path):
    """A second sm90 machine: its own label, its own rows, its own exit code."""
    root, dirs = fleet
    extra = tmp_path / "root"
    shutil.copytree(root, extra)
    base = gpu_rows("sm90", 4)
    second = Environment(**{**ENVS["sm90"].to_dict(), "host": "lab-d",
                            "gpu_uuid": "GPU-90dd0004-0000-0000-0000-000000000000"})
    slow = {"fp16_cache": 3.0, "native_int4": 1.3}
    assert write_bench_run(run_dir(extra, "sm90", "bench-sm90-lab-d"), second,
                           resample(base, 8, factor=slow), base,
                           fresh=resample(base, 9, factor=slow)) == 1
    assert _merge(extra, tmp_path / "m", "--baseline", str(extra / "baselines")) == EXIT_FAIL
    csv = pd.read_csv(tmp_path / "m" / "merged.csv")
    sm90 = csv[csv.arch == "sm90"]
    assert sm90.groupby("run").size().to_dict() == {"sm90 @ lab-b": 30, "sm90 @ lab-d": 30}
    assert sm90.groupby("run")["run_exit"].first().to_dict() == {"sm90 @ lab-b": 0,
                                                                 "sm90 @ lab-d": 1}
    md = (tmp_path / "m" / "summary.md").read_text()
    assert "#### sm90" in md and md.count("#### sm90") == 1
    assert "**sm90 @ lab-b**: exit 0" in md and "**sm90 @ lab-d**: exit 1" in md
    assert "| sm90 @ lab-b | sm90 @ lab-d |" in md           # winners side by side, apart


def test_a_refused_comparison_is_that_runs_error_and_the_others_are_reported(fleet, tmp_path):
    """A run measured with another measuring setting (accuracy_runs) is refused (exit 2,
    the reason in the summary) while the other runs are still reported; another GPU model
    of the arch is not refused: its timing rows are TIMING_NOT_COMPARABLE."""
    root, dirs = fleet
    other = tmp_path / "other"
    host_e = Environment(**{**ENVS["sm90"].to_dict(), "host": "lab-e"})
    base = gpu_rows("sm90", 4)
    write_bench_run(other / "sm90", host_e, resample(base, 6), base)
    meta = other / "sm90" / "synthetic.json"
    data = json.loads(meta.read_text())
    data["settings"]["accuracy_runs"] = 2
    meta.write_text(json.dumps(data))
    h100 = Environment(**{**ENVS["sm90"].to_dict(), "gpu_name": "synthetic H100",
                          "host": "lab-f"})
    write_bench_run(tmp_path / "h100" / "sm90", h100,
                    resample(base, 7, factor={"fp16_cache": 3.0}), base)
    rc = main(["merge", str(dirs["sm90"]), str(other), str(tmp_path / "h100"),
               "--baseline", str(root / "baselines"), "--out", str(tmp_path / "m")])
    assert rc == EXIT_ERROR
    md = (tmp_path / "m" / "summary.md").read_text()
    assert "**sm90 @ lab-e**: exit 2: not gated: refusing to compare against this baseline: " \
           "setting accuracy_runs differs" in md
    assert "**sm90 @ lab-b**: exit 0: passed" in md
    assert "**sm90 @ lab-f**: exit 0" in md and "TIMING_NOT_COMPARABLE" in md


def test_a_run_that_cannot_be_read_is_one_line_naming_it(fleet, tmp_path, capsys):
    root, dirs = fleet
    broken = tmp_path / "broken" / COMMIT / "sm90"
    shutil.copytree(dirs["sm90"], broken)
    csv = broken / "synthetic.csv"
    csv.write_text(csv.read_text().replace(",ok,", ",fine,", 1))
    assert main(["merge", str(dirs["sm89"]), str(tmp_path / "broken"),
                 "--out", str(tmp_path / "m")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness merge: error: ") and str(csv) in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "m").exists()
    assert main(["merge", str(tmp_path / "nothing-here"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"harness merge: error: {tmp_path / 'nothing-here'}: " \
                  "no such result file or directory"


def test_a_run_with_no_gate_record_is_nothing_to_compare(fleet, tmp_path, capsys):
    root, dirs = fleet
    bare = tmp_path / "bare"
    shutil.copytree(dirs["sm90"], bare)
    json_path = bare / "synthetic.json"
    meta = json.loads(json_path.read_text())
    del meta["gate"]                      # as a bench run with --no-compare stores it
    json_path.write_text(json.dumps(meta))
    assert main(["merge", str(bare), "--out", str(tmp_path / "m")]) == EXIT_NO_BASELINE
    assert "no stored gate record" in capsys.readouterr().out


def test_find_runs_walks_artifact_folders_and_skips_derived_ones(fleet):
    root, dirs = fleet
    found = find_runs(root / "fleet")
    assert found == sorted(dirs.values())
    assert find_runs(dirs["sm90"]) == [dirs["sm90"]]


def test_labels_are_unique_and_name_the_machine():
    a = Environment(arch="sm90", host="h1", gpu_uuid="GPU-aaaaaaaa-1", commit="1" * 40)
    b = Environment(arch="sm90", host="h1", gpu_uuid="GPU-bbbbbbbb-2", commit="1" * 40)
    c = Environment(arch="sm89", gpu_uuid="GPU-cccccccc-3")
    d = Environment(arch="sm89", gpu_uuid="GPU-cccccccc-3")
    assert label_runs([a, b, c, d]) == [
        "sm90 @ h1 [GPU aaaaaaaa]", "sm90 @ h1 [GPU bbbbbbbb]",
        "sm89 @ GPU-cccccccc-3 #1", "sm89 @ GPU-cccccccc-3 #2"]
    e = Environment(arch="sm90", host="h2", commit="2" * 40)
    f = Environment(arch="sm90", host="h2", commit="3" * 40)
    assert label_runs([e, f]) == ["sm90 @ h2 [222222222222]", "sm90 @ h2 [333333333333]"]


def test_machines_sharing_a_host_name_are_counted_by_boot_id(fleet, tmp_path):
    """Two VMs named 'vm' (as the H200 machines are) are two machines: the page says so
    and labels them by GPU."""
    root, _ = fleet
    base = gpu_rows("sm90", 4)
    dirs = []
    for i in range(2):
        env = Environment(**{**ENVS["sm90"].to_dict(), "host": "vm", "boot_id": f"boot-{i}",
                             "gpu_uuid": f"GPU-{i}0000000"})
        dirs.append(tmp_path / f"r{i}" / "sm90")
        write_bench_run(dirs[-1], env, resample(base, 10 + i), base)
    assert main(["merge", *map(str, dirs), "--baseline", str(root / "baselines"),
                 "--out", str(tmp_path / "m")]) == 0
    page = (tmp_path / "m" / "index.html").read_text()
    assert "2 runs, 2 machines, arches" in page
    assert "sm90 @ vm [GPU 00000000]" in page and "sm90 @ vm [GPU 10000000]" in page


def test_a_matrix_whose_baseline_refuses_is_left_out_and_the_others_are_gated(tmp_path, capsys):
    """As the bench gates each matrix on its own, `report` and `merge` refuse only the matrix
    whose baseline was measured with other settings (exit 2, its one-line reason); the other
    matrix of the same run directory keeps its verdicts (here a failing SLOWER)."""
    from dataclasses import replace

    from fleet_runs import FACTORS, S, write_baseline

    from harness.results.store import RunMeta, write_run

    base = gpu_rows("sm90", 4)
    other = [replace(r, matrix="other") for r in base]
    write_baseline(tmp_path, "sm90", base)
    write_run(tmp_path / "acc2" / "sm90", other, RunMeta(
        matrix="other", commit=COMMIT, arch="sm90", environment=ENVS["sm90"],
        settings=S.to_dict()))
    assert main(["baseline", "accept", str(tmp_path / "acc2" / "sm90"),
                 "--root", str(tmp_path / "baselines"), "--yes"]) == 0
    meta = tmp_path / "baselines" / "sm90" / "other.json"
    data = json.loads(meta.read_text())
    data["settings"]["warmup_ms"] = 10.0
    meta.write_text(json.dumps(data))
    run = tmp_path / "run" / "sm90"
    same = FACTORS["sm90"]
    slow = resample(base, 8, factor={**same, "fp16_cache": 1.5 * same.get("fp16_cache", 1.0)})
    write_bench_run(run, ENVS["sm90"], slow, base)
    write_run(run, resample(other, 9, factor=same), RunMeta(
        matrix="other", commit=COMMIT, arch="sm90", environment=ENVS["sm90"],
        settings=S.to_dict()))
    capsys.readouterr()
    assert main(["report", str(run), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "rep")]) == EXIT_ERROR
    captured = capsys.readouterr()
    assert "not gated: other: refusing to compare" in captured.err
    assert "setting warmup_ms differs" in captured.err
    assert "SLOWER" in captured.out                         # synthetic is still gated
    rows = pd.read_csv(tmp_path / "rep" / "report.csv")
    assert set(rows.matrix) == {"synthetic"}
    assert main(["merge", str(run), "--baseline", str(tmp_path / "baselines"),
                 "--out", str(tmp_path / "m")]) == EXIT_ERROR
    md = (tmp_path / "m" / "summary.md").read_text()
    assert "failing verdicts:" in md and "not gated: other: refusing" in md
