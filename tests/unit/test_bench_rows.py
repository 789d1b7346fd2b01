"""``bench_rows.py``: a bench given (case, path) rows measures those and no other, on any
path object (wrapped ones too), names why it left the others out, and refuses a malformed
row file in one line; the runner gives it to a bench whose request lists rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from harness.cases.case import GemmCase
from harness.cases.matrices import smoke as smoke_matrix
from harness.engines import bench_rows
from harness.engines.bench_runner import (
    ROWS_ENV,
    ROWS_PLUGIN,
    BenchRequest,
    subprocess_runner,
)
from harness.engines.bench_runner import (
    bench_rows as rows_for_keys,
)
from harness.kernels.base import PathRegistry
from harness.kernels.dispatch import FUSED_NAME
from harness.kernels.fp16_cache import Fp16CachePath
from harness.kernels.marlin.asym import MarlinAsymPath
from harness.kernels.native_int4 import NativeInt4Path
from harness.kernels.swiglu_pair import PAIR_KIND, FusedNativeSwiGLU
from harness.measure.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
TIMER = "tests/planted/fake_timer_plugin.py"


def test_the_runner_and_the_plugin_name_one_variable():
    assert bench_rows.ROWS_ENV == ROWS_ENV
    assert ROWS_PLUGIN == Path(bench_rows.__file__).resolve()


def test_restrict_leaves_out_every_row_not_listed_and_keeps_each_paths_own_reason():
    reg = PathRegistry()
    fp16, marlin = reg.register(Fp16CachePath()), reg.register(MarlinAsymPath())
    smoke = smoke_matrix()
    odd = GemmCase(M=32, N=320, K=256, group_size=128)   # Marlin has no kernel for it
    one = next(c for c in smoke if c.M == 1)
    own = marlin.unsupported_reason(odd)
    assert own and own != bench_rows.LEFT_OUT
    assert sorted(bench_rows.restrict(reg, {"marlin_asym": {odd.id, one.id}})) == [
        "fp16_cache", "marlin_asym"]
    assert marlin.unsupported_reason(one) is None
    assert marlin.unsupported_reason(odd) == own                  # its own limit still says
    assert all(fp16.unsupported_reason(c) == bench_rows.LEFT_OUT for c in smoke)
    assert all(marlin.unsupported_reason(c) == bench_rows.LEFT_OUT
               for c in smoke if c.id != one.id)


def test_a_derived_swiglu_row_is_measured_through_its_registered_path():
    keys = [("swiglu_pair-M4", "native_int4_fused", "graph"), ("M1", "fp16_cache", "graph"),
            ("M1", "fp16_cache", "cold")]
    assert rows_for_keys(keys) == (("M1", "fp16_cache"), ("swiglu_pair-M4", "native_int4"))


def test_a_bench_of_a_request_with_rows_measures_exactly_them(tmp_path):
    smoke = {c.id: c for c in smoke_matrix()}
    pair = next(i for i in smoke if i.startswith("swiglu_pair"))
    gemm = sorted(i for i in smoke if i != pair)
    wanted = ((gemm[0], "fp16_cache"), (gemm[1], "marlin_asym"), (pair, "fp16_cache"))
    req = BenchRequest("B", "HEAD", ROOT, tmp_path / "B", "smoke", 0,
                       paths=("fp16_cache", "marlin_asym"), plugins=(TIMER,), rows=wanted)
    subprocess_runner(req)
    assert json.loads((tmp_path / "B.rows.json").read_text()) == sorted(map(list, wanted))
    [csv] = (tmp_path / "B").glob("*/*/smoke.csv")
    got = pd.read_csv(csv)
    asked = pd.Series([(c, p) in wanted for c, p in zip(got.case_id, got.path, strict=True)])
    mine, rest = got[asked.values], got[~asked.values]
    # one row per timing mode: cpu on a CPU, graph and cold on a GPU (`nox -s tests-gpu`
    # runs this file there: it failed on an H100 when it counted one row per pair)
    modes = got["mode"].nunique()
    assert set(zip(mine.case_id, mine.path, strict=True)) == set(wanted)
    assert len(mine) == modes * len(wanted)
    # every asked row measured, or refused for its path's own reason, never left out
    assert (mine.error.fillna("") != bench_rows.LEFT_OUT).all()
    assert set(mine.status) <= {"ok", "unavailable"}
    assert (mine[mine.path == "fp16_cache"].status == "ok").all()
    assert len(rest) == modes * (2 * len(smoke) - len(wanted))
    assert (rest.status == "unavailable").all() and (rest.error == bench_rows.LEFT_OUT).all()
    plugins = json.loads(csv.with_suffix(".json").read_text())["plugins"]
    assert plugins[-1] == str(ROWS_PLUGIN)


def _plugin(env: dict) -> subprocess.CompletedProcess:
    code = f"import runpy; runpy.run_path({str(ROWS_PLUGIN)!r}); print('through')"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_malformed_row_file_stops_the_bench_in_one_line(tmp_path):
    bad = tmp_path / "rows.json"
    bad.write_text('{"M1": "fp16_cache"}')
    proc = _plugin(dict(os.environ, **{ROWS_ENV: str(bad)}))
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"harness bench: ${ROWS_ENV}={bad}: not a JSON list of [case_id, "
                           "path] pairs")


def test_without_the_variable_the_row_plugin_does_nothing():
    env = {k: v for k, v in os.environ.items() if k != ROWS_ENV}
    proc = _plugin(env)
    assert proc.returncode == 0 and proc.stdout.strip() == "through", proc.stderr


def test_an_ab_bench_skips_the_fresh_input_recheck_and_only_that():
    """The rows plugin makes a bench timing-only: the runner's re-check on fresh inputs
    (an accuracy check, judged by the job's own bench) no longer runs or fails a row."""
    class Checked:
        def _fresh_check(self, *args, **kwargs):
            raise AssertionError("re-checked")

        def _measure_path(self):
            return "kept"

    assert bench_rows.timing_only(Checked) is True
    assert Checked()._fresh_check("case", "path", "prepared", "first", "row") == ""
    assert Checked()._measure_path() == "kept"
    assert bench_rows.timing_only(type("Old", (), {})) is False
    # the name the plugin patches is the runner's own (a rename would silently re-check)
    assert callable(Runner.__dict__["_fresh_check"])


def test_the_fused_pair_row_follows_native_int4(monkeypatch):
    """The fused native pair path is derived when the bench runs and refuses no pair case
    of its own: the plugin makes it leave out what ``native_int4`` leaves out (it measured
    every pair case in every foreign A/B bench on an H100 before, 4.6 s a bench)."""
    monkeypatch.setattr(FusedNativeSwiGLU, "unsupported_reason",
                        FusedNativeSwiGLU.unsupported_reason)   # restored after the test
    reg = PathRegistry()
    native = reg.register(NativeInt4Path())
    pairs = [c for c in smoke_matrix() if c.kind == PAIR_KIND]
    fused = FusedNativeSwiGLU(native)
    assert all(fused.unsupported_reason(c) is None for c in pairs)
    bench_rows.restrict(reg, {"native_int4": {pairs[0].id}})
    assert bench_rows.follow_native(FusedNativeSwiGLU) is True
    assert fused.unsupported_reason(pairs[0]) is None
    assert all(fused.unsupported_reason(c) == bench_rows.LEFT_OUT for c in pairs[1:])
    gemm = next(c for c in smoke_matrix() if c.kind != PAIR_KIND)
    assert fused.unsupported_reason(gemm) not in (None, bench_rows.LEFT_OUT)  # its own
    assert bench_rows.follow_native(None) is False


def test_a_bench_with_native_int4_leaves_unasked_fused_rows_out(tmp_path):
    smoke = {c.id: c for c in smoke_matrix()}
    pair = next(i for i in smoke if i.startswith("swiglu_pair"))
    gemm = sorted(i for i in smoke if i != pair)[0]
    for label, wanted in (("gemm", ((gemm, "native_int4"), (pair, "fp16_cache"))),
                          ("pair", ((pair, "native_int4"),))):
        req = BenchRequest(label, "HEAD", ROOT, tmp_path / label, "smoke", 0,
                           paths=("fp16_cache", "native_int4"), plugins=(TIMER,),
                           rows=wanted)
        subprocess_runner(req)
        [csv] = (tmp_path / label).glob("*/*/smoke.csv")
        got = pd.read_csv(csv)
        fused = got[got.path == FUSED_NAME]
        assert len(fused), f"{label}: no {FUSED_NAME} row written"
        if label == "gemm":      # native_int4 asked on a GEMM case only: no fused row timed
            assert (fused.status == "unavailable").all()
            assert (fused.error == bench_rows.LEFT_OUT).all()
        else:                    # asked on the pair: its fused row comes with it
            assert (fused.status == "ok").all(), fused[["status", "error"]]
