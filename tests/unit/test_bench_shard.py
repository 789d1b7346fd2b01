"""``harness bench --gpus`` on the CPU: worker processes that stand in for devices.

Real ``harness bench`` processes (their workers spawned, as on a GPU host), a part of the
smoke matrix: the merged result against one device's, a worker killed on one case (the
case moves to another device; killed everywhere, its rows are errors and the rest is
measured), an interrupted run completed by ``--resume``. Then the pieces on their own: the
``--gpus`` parser, the per-device spread, the writer's reorder.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fleet_runs import ENVS, gpu_rows, write_baseline, write_bench_run

from harness.cli import main
from harness.engines.bench_shard import case_cost, mixed_models, parse_gpus
from harness.reports.devices import device_spread
from harness.results.schema import ResultRow, column_names
from harness.results.store import RunMeta, row_cells
from harness.results.writer import RowWriter

ROOT = Path(__file__).resolve().parents[2]
KILL = str(ROOT / "tests" / "planted" / "worker_kill_plugin.py")
PART = ["--matrix", "smoke", "--filter", "kind == 'gemm' and M <= 17",
        "--paths", "native_int4,fp16_cache", "--no-progress", "--no-compare"]


def _bench(out: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_KILL")}
    full.update(env or {})
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "harness", "bench", "--cpu", "--out", str(out),
                           *PART, *args], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=600)


def _rows(out: Path) -> list[dict]:
    [path] = out.glob("*/cpu/smoke.csv")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _keys(rows: list[dict]) -> list[tuple[str, str, str]]:
    return [(r["case_id"], r["path"], r["mode"]) for r in rows]


@pytest.mark.slow
def test_two_stand_in_devices_give_one_devices_rows_and_name_the_device(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert _bench(one).returncode == 0
    done = _bench(two, "--gpus", "0,1")
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = _rows(one), _rows(two)
    assert list(a[0]) == list(b[0]) == column_names()
    assert _keys(a) == _keys(b) and len(a) == 3 * 2       # same rows, same order
    assert {r["gpu_uuid"] for r in a} == {""} and {r["gpu_index"] for r in a} == {"-1"}
    assert {(r["gpu_index"], r["gpu_uuid"]) for r in b} == {("0", "cpu:0"), ("1", "cpu:1")}
    assert all(r["status"] == "ok" for r in b)
    for rows in (a, b):      # a case is measured by one device: its rows name one device
        by_case = {}
        for r in rows:
            by_case.setdefault(r["case_id"], set()).add(r["gpu_uuid"])
        assert all(len(v) == 1 for v in by_case.values())
    [meta] = two.glob("*/cpu/smoke.json")
    stored = json.loads(meta.read_text())
    devices = stored["devices"]
    assert stored["environment"]["gpu_uuids"] == "cpu:0,cpu:1"     # a baseline names both
    assert [(d["slot"], d["gpu_index"], d["gpu_uuid"]) for d in devices] == [
        (0, 0, "cpu:0"), (1, 1, "cpu:1")]
    assert all(d["pid"] > 0 and d["ceilings"] for d in devices)


@pytest.mark.slow
def test_a_killed_worker_loses_only_its_case_which_another_device_measures(tmp_path):
    once = tmp_path / "killed-once"
    done = _bench(tmp_path / "r", "--gpus", "0,1", "--plugin", KILL,
                  env={"HARNESS_KILL_M": "16", "HARNESS_KILL_ONCE": str(once)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert once.is_file()                                  # a worker was killed
    said = done.stdout + done.stderr
    found = re.search(r"M16-N256-K512-gK-s4: the worker of device (\d) died \(BrokenProcessPool"
                      r".*\); retried on another device", said)
    assert found, said[-3000:]
    rows = _rows(tmp_path / "r")
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    moved = {r["gpu_uuid"] for r in rows if r["M"] == "16"}
    assert moved == {f"cpu:{1 - int(found.group(1))}"}      # measured by the other device
    # the json names the restarted worker's pid, not the dead one's
    [meta] = (tmp_path / "r").glob("*/cpu/smoke.json")
    devices = {d["slot"]: d for d in json.loads(meta.read_text())["devices"]}
    started = dict(re.findall(r"worker (\d) on cpu .*, pid (\d+)", said))
    dead, alive = devices[int(found.group(1))], devices[1 - int(found.group(1))]
    assert dead["restarts"] == 1 and len(dead["pids"]) == 2
    assert dead["pids"][0] == int(started[found.group(1)]) != dead["pid"] == dead["pids"][1]
    assert alive["restarts"] == 0 and alive["pids"] == [alive["pid"]]


@pytest.mark.slow
def test_a_case_that_kills_every_worker_becomes_error_rows_and_the_rest_is_measured(tmp_path):
    done = _bench(tmp_path, "--gpus", "0,1", "--plugin", KILL, env={"HARNESS_KILL_M": "16"})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(tmp_path)
    assert len(rows) == 6
    lost = [r for r in rows if r["M"] == "16"]        # the whole case: its rows come back
    fine = [r for r in rows if r not in lost]         # from the worker when it is done
    assert len(lost) == 2 and all(r["status"] == "error" for r in lost)
    assert all("not measured: lost 2 times" in r["error"] and r["error"].count("died") == 2
               for r in lost)
    assert all(r["status"] == "ok" for r in fine)


@pytest.mark.slow
def test_an_interrupted_sharded_run_completes_with_resume(tmp_path):
    assert _bench(tmp_path, "--gpus", "0,1").returncode == 0
    [path] = tmp_path.glob("*/cpu/smoke.csv")
    lines = path.read_text().splitlines(keepends=True)
    full = _rows(tmp_path)
    path.write_text("".join(lines[:3]) + lines[3][:40])     # two rows kept, a torn third
    again = _bench(tmp_path, "--gpus", "0,1", "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2 rows done" in again.stdout
    rows = _rows(tmp_path)
    assert _keys(rows) == _keys(full)
    assert rows[:2] == full[:2]                  # the finished rows were kept, not re-measured


@pytest.mark.slow
def test_sigterm_stops_the_workers_cases_in_flight_and_resume_completes(tmp_path):
    """A worker stuck in a case (a kernel that never returns) must not keep an interrupted
    run alive: SIGTERM to the bench ends it (exit 143) with its workers, at once, not after
    their cases in flight; --resume then measures what was left."""
    hung = tmp_path / "hung"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_KILL")}
    env.update(HARNESS_KILL_M="16", HARNESS_KILL_ONCE=str(hung), HARNESS_KILL_HANG="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "harness", "bench", "--cpu", "--out", str(out), *PART,
           "--gpus", "0,1", "--plugin", KILL]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not hung.exists():             # a worker is now inside its hour-long case
            assert proc.poll() is None and time.monotonic() < deadline, "no worker hung"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        said, _ = proc.communicate(timeout=60)      # the hung case would hold it for an hour
    finally:              # a failed run: take its hung workers down with it
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, said[-2000:]
    assert "run the same command with --resume" in said
    pids = [int(p) for p in re.findall(r"worker \d on cpu .*, pid (\d+)", said)]
    assert len(pids) == 2
    for pid in pids:                                  # no worker outlives the bench
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    again = _bench(out, "--gpus", "0,1", "--resume", "--plugin", KILL,   # it hangs once only
                   env={"HARNESS_KILL_M": "16", "HARNESS_KILL_ONCE": str(hung),
                        "HARNESS_KILL_HANG": "1"})
    assert again.returncode == 0, again.stderr[-2000:]
    rows = _rows(out)
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)


def test_gpus_parser_names_what_is_wrong():
    assert parse_gpus("all", 4, on_cpu=False) == [0, 1, 2, 3]
    assert parse_gpus("0, 1,3", 4, on_cpu=False) == [0, 1, 3]
    assert parse_gpus("0,0", 1, on_cpu=False) == [0, 0]            # two workers on one GPU
    assert parse_gpus("0,1,2", 0, on_cpu=True) == [0, 1, 2]        # CPU stand-ins
    with pytest.raises(ValueError, match="there is no GPU 4 .4 visible: 0..3."):
        parse_gpus("0,4", 4, on_cpu=False)
    with pytest.raises(ValueError, match="'x' is not a device index"):
        parse_gpus("0,x", 4, on_cpu=False)
    with pytest.raises(ValueError, match="'' is not a device index"):
        parse_gpus("", 4, on_cpu=False)
    with pytest.raises(ValueError, match="no CUDA GPU is visible"):
        parse_gpus("all", 0, on_cpu=False)
    with pytest.raises(ValueError, match="on a CPU name the stand-in devices"):
        parse_gpus("all", 0, on_cpu=True)


def test_gpus_of_two_models_are_refused_naming_them():
    workers = [{"gpu_name": "NVIDIA H200", "gpu_index": 0},
               {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_index": 1},
               {"gpu_name": "NVIDIA H200", "gpu_index": 2}]
    why = mixed_models(workers)
    assert why == ("--gpus: the devices are of different models (NVIDIA H100 80GB HBM3: "
                   "devices 1, NVIDIA H200: devices 0,2); a run is gated against one model's "
                   "baseline: list one model's GPUs")
    assert mixed_models([workers[0], workers[2]]) is None


def test_cases_go_out_longest_first():
    class Case:
        def __init__(self, M, N, K):
            self.M, self.N, self.K = M, N, K

    cases = [Case(1, 2048, 2048), Case(1024, 8192, 2048), Case(16, 8192, 8192)]
    order = sorted(cases, key=case_cost, reverse=True)
    assert [(c.M, c.N) for c in order] == [(1024, 8192), (16, 8192), (1, 2048)]


def test_a_baseline_source_of_a_sharded_run_names_every_gpu_and_never_a_path():
    from harness.reports.calibration import run_identity
    from harness.results.environment import Environment

    env = Environment.from_dict({"arch": "sm90", "gpu_name": "H200", "gpu_uuid": "GPU-a",
                                 "boot_id": "b1", "host": "h", "commit": "abc",
                                 "date": "2026-12-04", "gpu_uuids": "GPU-a,GPU-b"})
    ident = run_identity(env)
    assert ident["gpu_uuids"] == "GPU-a,GPU-b" and ident["machine"] == "boot:b1"
    assert "gpu_uuids" not in run_identity(Environment.from_dict({"arch": "sm90",
                                                                   "gpu_uuid": "GPU-a"}))
    assert not any("/" in str(v) for k, v in ident.items() if k != "date")


def _row(case: str, device: int, us: float, mode: str = "graph") -> ResultRow:
    return ResultRow(matrix="m", case_id=case, path="p", mode=mode, M=1, N=1, K=1,
                     group_size=1, gpu_index=device, gpu_uuid=f"GPU-{device}",
                     time_us_median=us)


def test_a_device_reading_slower_than_its_siblings_is_reported():
    base = [_row(f"c{i}", -1, 100.0) for i in range(12)]
    run = [_row(f"c{i}", i % 3, 100.0 * (1.06 if i % 3 == 2 else 1.0 + 0.002 * (i % 3)))
           for i in range(12)]
    spread = {d.gpu_index: d for d in device_spread(run, base, min_effect=0.03)}
    assert [spread[i].slow for i in range(3)] == [False, False, True]
    assert spread[2].rows == 4 and spread[2].median_ratio == pytest.approx(1.06)
    assert spread[2].siblings_ratio == pytest.approx(1.001)
    # within min_effect of its siblings: not reported; CPU rows never compared
    calm = [_row(r.case_id, r.gpu_index, 102.0 if r.gpu_index == 2 else 100.0) for r in run]
    assert not any(d.slow for d in device_spread(calm, base, min_effect=0.03))
    cpu = [_row(r.case_id, r.gpu_index, r.time_us_median, mode="cpu") for r in run]
    assert device_spread(cpu, base, min_effect=0.03) == []


def test_reorder_puts_rows_in_case_order_atomically_and_keeps_appending(tmp_path):
    path = tmp_path / "r" / "m.csv"
    meta = RunMeta(matrix="m", commit="c", arch="cpu")
    rank = {"a": 0, "b": 1, "c": 2}
    with RowWriter(path, meta=meta) as w:
        for case, path_name in (("c", "p"), ("a", "p"), ("b", "p"), ("a", "q")):
            w.write(ResultRow(matrix="m", case_id=case, path=path_name, mode="cpu", M=1, N=1,
                              K=1, group_size=1))
        w.reorder(lambda row: rank[row.case_id])
        w.write(ResultRow(matrix="m", case_id="d", path="p", mode="cpu", M=1, N=1, K=1,
                          group_size=1))
    with open(path, newline="") as fh:
        got = [(r["case_id"], r["path"]) for r in csv.DictReader(fh)]
    assert got == [("a", "p"), ("a", "q"), ("b", "p"), ("c", "p"), ("d", "p")]
    assert not list(path.parent.glob(".*reorder*"))


@pytest.mark.slow
def test_the_job_passes_gpus_to_its_bench(tmp_path):
    full = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "harness", "job", "--cpu", "--steps", "gemm", "--gpus", "0,1",
         "--out", str(tmp_path), "--baselines", str(tmp_path / "none"), "--no-progress",
         "--no-ab-confirm"], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]   # no baseline
    rows = _rows(tmp_path)
    assert {r["gpu_uuid"] for r in rows} == {"cpu:0", "cpu:1"}


@pytest.mark.slow
def test_a_row_measured_again_goes_back_to_the_device_that_measured_it(tmp_path):
    """The gate's re-measure of a sharded run: each key to the worker of its row's device."""
    from harness.cases import MATRICES
    from harness.config import load_settings
    from harness.engines.bench_shard import ShardedBench
    from harness.engines.shard_worker import WorkerSpec

    settings = load_settings(None, {})
    cases = MATRICES.cases("smoke", "kind == 'gemm' and M <= 17")
    extra = {"filter": "", "cpu_threads": 1, "plugins": []}
    specs = [WorkerSpec(slot=i, device=i, cpu=True, settings=settings, modes=("cpu",),
                        paths=("native_int4",), plugins=(), cpu_threads=1, extra=extra)
             for i in range(2)]
    said: list[str] = []
    shard = ShardedBench(specs, commit="c", arch="cpu", settings=settings, modes=("cpu",),
                         paths=["native_int4"], out=tmp_path, resume=False, overwrite=False,
                         extra=extra, partial=True, echo=said.append)
    try:
        rows = shard.measure("smoke", cases)
        again = shard.remeasure_hook("smoke")([r.key for r in rows])
    finally:
        shard.close()
    assert len(rows) == 3 and {r.gpu_uuid for r in rows} == {"cpu:0", "cpu:1"}
    assert sorted(r.key for r in again) == sorted(r.key for r in rows)
    device = {r.key: r.gpu_uuid for r in rows}
    assert all(r.gpu_uuid == device[r.key] and r.status == "ok" for r in again)
    assert any("worker 1 on cpu (device 1, cpu:1)" in line for line in said)


def test_the_acceptance_summary_counts_planted_rows_per_gpu_of_a_sharded_run(tmp_path):
    """scripts/acceptance_summary.py: 'caught on every GPU' is read per gpu_uuid."""
    run = tmp_path / "sm90"
    run.mkdir()
    rows = [ResultRow(matrix="production", case_id=f"c{i}", path="fp16_cache", mode="graph",
                      M=1, N=1, K=1, group_size=1, gpu_index=i % 2, gpu_uuid=f"GPU-{i % 2}")
            for i in range(4)]
    with open(run / "production.csv", "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(column_names())
        out.writerows(row_cells(r) for r in rows)
    verdicts = {"c0|fp16_cache|graph": "SLOWER", "c1|fp16_cache|graph": "SLOWER",
                "c2|fp16_cache|graph": "SLOWER", "c3|fp16_cache|graph": "SAME"}
    gate = {"verdicts": verdicts, "failing": {"SLOWER": 3}, "exit_code": 1}
    (run / "production.json").write_text(json.dumps({"extra": {"gate": gate}}))
    said = subprocess.run([sys.executable, str(ROOT / "scripts" / "acceptance_summary.py"),
                           str(run), "--plant", "fp16_cache"], capture_output=True, text=True,
                          check=True).stdout
    assert "planted fp16_cache (graph): 3/4 SLOWER (75.0%), 0 other failing" in said
    assert said.rstrip().endswith("per GPU: GPU-0: 2/2, GPU-1: 1/2"), said


def test_report_of_a_sharded_run_names_the_gpu_slower_than_its_siblings(tmp_path, capsys):
    """``harness report`` of a stored sharded run prints the bench's per-device lines: the
    GPU whose rows read 8% over the baseline is SLOW, its siblings ok."""
    base = gpu_rows("sm90", seed=1)
    write_baseline(tmp_path, "sm90", base)
    uuids = ("GPU-a", "GPU-b", "GPU-c")
    cases = sorted({r.case_id for r in base})
    run = []
    for r in base:
        i = cases.index(r.case_id) % 3
        scale = 1.08 if i == 2 else 1.0
        samples = ";".join(f"{float(t) * scale:.4f}" for t in r.samples_us.split(";") if t)
        run.append(replace(r, gpu_index=i, gpu_uuid=uuids[i], samples_us=samples,
                           time_us_median=r.time_us_median * scale))
    run_dir = tmp_path / "run" / "sm90"
    write_bench_run(run_dir, ENVS["sm90"], run, base)
    capsys.readouterr()
    main(["report", str(run_dir), "--baseline", str(tmp_path / "baselines")])
    said = capsys.readouterr().out
    lines = [line for line in said.splitlines() if " device " in line]
    assert len(lines) == 3, said
    assert re.search(r"synthetic device 2 \(GPU-c\): \d+ rows, median x1\.0[78]\d of the "
                     r"baseline: SLOW: \+[78]\.\d% against its siblings", lines[2]), lines
    assert lines[0].endswith(": ok") and lines[1].endswith(": ok"), lines
