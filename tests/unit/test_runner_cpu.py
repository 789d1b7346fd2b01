"""The runner on a CPU: fake paths that misbehave are caught, rows are stored, resume works."""

from __future__ import annotations

import argparse
import math

import pytest
import torch

from harness.cases.case import GemmCase
from harness.commands import bench as bench_cli
from harness.config import load_settings
from harness.kernels.base import (
    GemmPath,
    KernelReturnCode,
    PathRegistry,
    Prepared,
    int4_weight_bytes,
)
from harness.measure.roofline import Peaks
from harness.measure.runner import RunContext, Runner
from harness.results.store import read_rows
from harness.results.writer import RowWriter

CASES = [GemmCase(M=4, N=128, K=256, group_size=128, seed=9, tags=("t",)),
         GemmCase(M=2, N=64, K=128, group_size=128, seed=9, tags=("t",))]
FAST = {"warmup_ms": 1, "max_case_seconds": 0.05, "min_samples": 5, "max_samples": 50,
        "target_rel_spread": 0.05}


class Good(GemmPath):
    name, description = "good", "fp32 torch matmul"
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 zero G*N*2"

    def weight_bytes(self, K, N, groups):       # the byte model the roofline asks for
        return int4_weight_bytes(K, N, groups, 4)

    def unavailable_reason(self, device):
        return None

    def prepare(self, weight, device):
        W = weight.dequantize(torch.float64).float().to(device)
        return Prepared(self.name, weight, device, state={"W": W}, extra_bytes=W.numel() * 4)

    def run(self, prepared, A, out):
        out.copy_(A.float() @ prepared.state["W"])
        return out


class Raises(Good):
    name = "raises"

    def run(self, prepared, A, out):
        raise RuntimeError("kernel exploded")


class BadRc(Good):
    name = "bad_rc"

    def run(self, prepared, A, out):
        raise KernelReturnCode(self.name, 2, "no kernel for this group size")


class LeavesNaN(Good):
    name = "leaves_nan"

    def run(self, prepared, A, out):
        full = A.float() @ prepared.state["W"]
        out[:, 1:].copy_(full[:, 1:])          # column 0 never written
        return out


class Caches(Good):
    name = "caches"

    def run(self, prepared, A, out):
        if "C" not in prepared.state:
            prepared.state["C"] = (A.float() @ prepared.state["W"]).to(out.dtype)
        out.copy_(prepared.state["C"])
        return out


class Missing(Good):
    name = "missing"

    def unavailable_reason(self, device):
        return "needs a GPU of sm80 or newer"


class Counting(Good):
    name = "counting"
    prepares = 0

    def prepare(self, weight, device):
        Counting.prepares += 1
        return super().prepare(weight, device)


def _registry(*paths):
    reg = PathRegistry()
    for p in paths:
        reg.register(p)
    return reg


def _ctx(reg, **kw):
    return RunContext(matrix="unit", device=torch.device("cpu"),
                      settings=load_settings(overrides=FAST), modes=("cpu",), registry=reg,
                      arch="cpu", device_name="cpu", commit="test", **kw)


def _by_path(rows):
    return {r.path: r for r in rows}


def test_misbehaving_paths_are_caught_and_recorded():
    reg = _registry(Good(), Raises(), BadRc(), LeavesNaN(), Caches(), Missing())
    rows = Runner(_ctx(reg)).run(CASES[:1])
    assert len(rows) == 6
    r = _by_path(rows)
    good = r["good"]
    assert good.status == "ok" and good.error == ""
    assert good.time_us_median > 0 and good.n_samples >= 3   # the time cap may stop at 3
    assert good.time_us_ci_lo <= good.time_us_median <= good.time_us_ci_hi
    assert 0 < good.rel_err < 1e-3 and good.nonfinite == 0
    assert good.bytes_moved == 128 * 256 // 2 + 2 * 2 * 2 * 128 + 4 * 256 * 2 + 4 * 128 * 2
    assert good.extra_bytes == 128 * 256 * 4 and good.prepare_seconds >= 0
    assert len(good.samples()) == min(good.n_samples, 200)
    assert r["raises"].status == "error" and "kernel exploded" in r["raises"].error
    assert r["bad_rc"].status == "error" and "rc=2" in r["bad_rc"].error
    assert r["leaves_nan"].status == "error" and "non-finite" in r["leaves_nan"].error
    assert r["leaves_nan"].nonfinite == 4               # one column of M = 4 rows
    assert r["caches"].status == "error" and "fresh inputs" in r["caches"].error
    assert r["caches"].time_us_median > 0                # timed, then caught by the re-check
    assert r["missing"].status == "unavailable" and "sm80" in r["missing"].error


def test_the_runner_accounts_its_wall_time_by_stage():
    import time

    runner = Runner(_ctx(_registry(Good(), Missing())))
    t0 = time.perf_counter()
    runner.run(CASES)
    total = time.perf_counter() - t0
    assert set(runner.wall) == {"data", "set-up", "cpu", "re-check"}
    assert all(v > 0 for v in runner.wall.values()), runner.wall     # two cases of a real path
    assert runner.wall["cpu"] >= 2 * 0.9 * FAST["warmup_ms"] / 1e3   # each timing warms up
    assert sum(runner.wall.values()) <= total


def test_rows_carry_identity_and_dispatch_columns():
    rows = Runner(_ctx(_registry(Good()))).run(CASES[:1])
    row = rows[0]
    assert (row.matrix, row.case_id, row.mode, row.arch, row.commit) == (
        "unit", CASES[0].id, "cpu", "cpu", "test")
    assert (row.M, row.N, row.K, row.group_size) == (4, 128, 256, 128)
    assert row.implementation == "fp32 torch matmul"
    # Without the dispatcher model the reason says so (never a silent blank).
    assert row.dispatch_path or row.fallback_reason


def test_impossible_time_is_rejected():
    class Tiny(RunContext):
        @property
        def maxima(self):
            return Peaks(gbps=1e-3, tflops=1e-9, source="absurdly slow test device")

    ctx = Tiny(matrix="unit", device=torch.device("cpu"), settings=load_settings(overrides=FAST),
               modes=("cpu",), registry=_registry(Good()), arch="cpu", device_name="cpu")
    row = Runner(ctx).run(CASES[:1])[0]
    assert row.status == "rejected"
    assert "below the physical floor" in row.error and row.time_us_median > 0


def test_rows_are_written_and_resume_skips_finished_keys(tmp_path):
    csv_path = tmp_path / "unit.csv"
    Counting.prepares = 0
    reg = _registry(Counting())
    with RowWriter(csv_path, mode="new") as w:
        Runner(_ctx(reg), w).run(CASES[:1])
    assert [r.case_id for r in read_rows(csv_path)] == [CASES[0].id]
    assert Counting.prepares == 1
    with RowWriter(csv_path, mode="resume") as w:
        assert w.done_keys == {(CASES[0].id, "counting", "cpu")}
        new = Runner(_ctx(reg), w).run(CASES)
    assert [r.case_id for r in new] == [CASES[1].id]     # the finished case was skipped
    assert Counting.prepares == 2
    assert sorted(r.case_id for r in read_rows(csv_path)) == sorted(c.id for c in CASES)


def test_arch_mismatch_message_names_both():
    msg = bench_cli.arch_mismatch("sm89", "sm90")
    assert "sm89" in msg and "sm90" in msg and "--force" in msg
    assert bench_cli.arch_mismatch("sm90", "sm90") is None
    assert "no CUDA GPU" in bench_cli.arch_mismatch("sm90", "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU skip; a GPU is visible")
def test_bench_with_a_gpu_arch_on_a_cpu_machine_skips_with_exit_0(tmp_path, capsys):
    from harness.cli import main

    rc = main(["bench", "--arch", "sm90", "--out", str(tmp_path / "r")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "expected arch sm90" in out and "no CUDA GPU" in out
    assert not (tmp_path / "r").exists()


def test_bench_cli_smoke_on_cpu_writes_results_and_candidate(tmp_path, capsys):
    from harness.cli import main
    from harness.kernels.base import PATHS

    try:
        from harness.kernels import registry_load
        registry_load.load_all()
    except ImportError:
        pass
    cpu_paths = [n for n in PATHS.names()
                 if PATHS.get(n).unavailable_reason(torch.device("cpu")) is None]
    if not cpu_paths:
        pytest.skip("no GEMM path that runs on a CPU is registered yet")
    out, bases = tmp_path / "results", tmp_path / "baselines"
    args = ["bench", "--cpu", "--matrix", "smoke", "--out", str(out), "--baselines", str(bases),
            "--no-progress", "--paths", ",".join(cpu_paths)]
    for key, value in FAST.items():
        args += ["--set", f"{key}={value}"]
    assert main(args) == 3                  # first run, no baseline: NEW rows, a candidate
    csvs = list(out.glob("*/cpu/smoke.csv"))
    assert len(csvs) == 1
    rows = read_rows(csvs[0])
    # 4 GEMM cases x paths, and the SwiGLU pair: each path as a pair + the fused native
    fused = ["native_int4_fused"] if "native_int4" in cpu_paths else []
    assert len(rows) == 5 * len(cpu_paths) + len(fused)
    assert {r.path for r in rows} == set(cpu_paths) | set(fused)
    assert {r.path for r in rows if r.kind == "swiglu_pair"} == set(cpu_paths) | set(fused)
    assert all(r.status == "ok" and r.mode == "cpu" and r.arch == "cpu" for r in rows), \
        [(r.path, r.status, r.error) for r in rows]
    assert all(not math.isnan(r.time_us_median) and r.rel_err < 1e-2 for r in rows)
    candidate = csvs[0].parent / "candidate-baseline"
    assert (candidate / "smoke.csv").is_file()
    assert not bases.exists()                              # never writes a baseline itself
    assert "CANDIDATE" in capsys.readouterr().out
    # With that candidate promoted by hand, a second run is gated against it (min_effect
    # huge, so CPU noise cannot make a row SLOWER): exit 0 and the gate's summary line.
    (bases / "cpu").mkdir(parents=True)
    for f in candidate.iterdir():
        (bases / "cpu" / f.name).write_bytes(f.read_bytes())
    assert main(args + ["--overwrite", "--set", "min_effect=100"]) == 0
    assert "gate smoke vs" in capsys.readouterr().out
    # An existing result CSV is refused without --resume/--overwrite (one-line error, exit 2).
    assert main(args) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_rotated_copies_are_distinct_buffers_with_equal_values():
    from harness.cases.data import case_data
    from harness.measure.rotation import build_operands, prepared_nbytes

    data = case_data(CASES[0])
    prepared = Good().prepare(data.weight, torch.device("cpu"))
    ops = build_operands(prepared, data.A, 3)
    ptrs = {p.state["W"].data_ptr() for p in ops.prepared}
    assert len(ptrs) == 3 and len({a.data_ptr() for a in ops.A}) == 3
    assert all(torch.equal(p.state["W"], prepared.state["W"]) for p in ops.prepared)
    assert all(torch.equal(p.weight.q, prepared.weight.q) for p in ops.prepared)
    assert prepared_nbytes(prepared) == 128 * 256 * 4 + data.weight.q.numel() + 2 * 2 * 2 * 128
    step = ops.step_fn(Good().run)
    step(4)                                               # call 4 -> copy 1
    assert torch.isnan(ops.out[0]).all() and not torch.isnan(ops.out[1]).any()


def test_device_clock_only_moves_forward():
    from harness.measure.single import DeviceClock

    clock = DeviceClock()
    t0 = clock()
    clock.advance(12.5e-6)
    assert clock() - t0 == pytest.approx(12.5e-6)
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1.0)


def test_mode_cpu_alone_runs_the_cpu_paths_where_a_gpu_is_visible(tmp_path, monkeypatch, capsys):
    """``--mode cpu`` without ``--cpu`` on a GPU machine: the CPU paths, not an error. The A/B
    and bisect of a CPU run pass only ``--mode cpu`` to the benches they start; on the H200
    those benches refused ("--mode 'cpu' is not available on cuda") and the A/B was lost."""
    from harness.cli import main

    wants_cpu = bench_cli.wants_cpu
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # a GPU "is visible"
    assert wants_cpu(argparse.Namespace(cpu=False, mode="cpu"))
    assert wants_cpu(argparse.Namespace(cpu=True, mode=None))
    assert not wants_cpu(argparse.Namespace(cpu=False, mode="cpu,graph"))
    assert not wants_cpu(argparse.Namespace(cpu=False, mode=None))
    out = tmp_path / "results"
    args = ["bench", "--mode", "cpu", "--matrix", "smoke", "--filter", "M == 16",
            "--paths", "fp16_cache", "--out", str(out), "--no-compare", "--no-progress"]
    for key, value in FAST.items():
        args += ["--set", f"{key}={value}"]
    assert main(args) == 0
    assert [p.parent.name for p in out.glob("*/*/smoke.csv")] == ["cpu"]
