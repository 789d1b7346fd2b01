"""Issue 7, faults during runs: kernels that raise, run out of memory or return a non-zero
code; interrupted sweeps (SIGTERM, SIGKILL, Ctrl-C of a real ``python -m harness bench``);
two writers of one results directory; atomic writes; work escaping the timed stream.

Every fault ends as an ERROR row with its reason while the sweep goes on, and the gate
fails; every finished row survives an interruption and ``--resume`` completes the run to
the rows (keys and non-timing columns) of an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from planted.defects import FaultPath, swapped_path

from harness.cases.case import GemmCase
from harness.cli import main
from harness.config import load_settings
from harness.kernels.base import PathRegistry
from harness.kernels.registry_load import load_all
from harness.measure.escape import escaped_work
from harness.measure.runner import RunContext, Runner
from harness.reports.gate import Verdict, evaluate
from harness.results.schema import column_names
from harness.results.store import read_rows
from harness.results.writer import LOCK_NAME

FAST = {"warmup_ms": 1, "max_case_seconds": 0.03, "min_samples": 3, "max_samples": 20,
        "target_rel_spread": 0.05}
GATE = load_settings(overrides={"min_effect": 100.0})     # CPU timing noise never SLOWER
CASES = [GemmCase(M=4, N=256, K=256, group_size=128, seed=3),
         GemmCase(M=2, N=128, K=256, group_size=128, seed=3)]


def _run(path, cases=CASES):
    reg = PathRegistry()
    reg.register(path)
    ctx = RunContext(matrix="unit", device=torch.device("cpu"),
                     settings=load_settings(overrides=FAST),
                     modes=("cpu",), registry=reg, arch="cpu", device_name="cpu", commit="t")
    return Runner(ctx).run(cases)


@pytest.fixture(scope="module")
def clean():
    return _run(load_all().get("native_int4"))


# --------------------------------------------------------------------------- kernel faults
FAULTS = [  # (id, fault, where, when, the reason the row must carry)
    ("raise-first-call", "raise", "run", lambda M, i: M == 4,
     "RuntimeError: planted kernel failure"),
    ("oom-first-call", "oom", "run", lambda M, i: M == 4,
     "CUDA out of memory: CUDA out of memory. Tried"),
    ("oom-in-prepare", "oom", "prepare", lambda K, N: N == 256, "CUDA out of memory"),
    ("oom-while-timing", "oom", "run", lambda M, i: M == 4 and i == 8,
     "cpu timing: CUDA out of memory"),
    ("nonzero-rc", "rc", "run", lambda M, i: M == 4, "native_int4: kernel returned rc=2 (planted"),
    ("rc-in-prepare", "rc", "prepare", lambda K, N: N == 256, "rc=2"),
]


@pytest.mark.parametrize("fault, where, when, reason", [f[1:] for f in FAULTS],
                         ids=[f[0] for f in FAULTS])
def test_a_failing_kernel_is_an_error_the_sweep_goes_on_the_gate_fails(clean, fault, where, when,
                                                                       reason):
    rows = _run(FaultPath(load_all().get("native_int4"), fault, when=when, where=where))
    bad, good = rows
    assert bad.case_id == CASES[0].id and bad.status == "error", bad
    assert reason in bad.error and "\n" not in bad.error
    assert good.case_id == CASES[1].id and good.status == "ok"       # the next case ran
    result = evaluate(rows, clean, GATE)
    v = {x.case_id: x for x in result.verdicts}
    assert v[CASES[0].id].verdict == Verdict.ERROR and v[CASES[0].id].fails
    assert reason in v[CASES[0].id].reason
    assert not v[CASES[1].id].fails and result.exit_code == 1


class FailsOnFreshInputs(FaultPath):
    """Right on the first inputs; raises once the activations change (the re-check)."""

    def run(self, prepared, A, out):
        first = prepared.state.setdefault("_first_A", A.clone())
        if not torch.equal(first, A):
            self._raise(int(A.shape[0]))
        return self.inner.run(prepared, A, out)


def test_a_failure_in_the_fresh_input_recheck_is_an_error(clean):
    rows = _run(FailsOnFreshInputs(load_all().get("native_int4"), "oom"))
    assert all(r.status == "error" for r in rows)
    assert all(r.error.startswith("re-check on fresh inputs after timing: CUDA out of memory")
               for r in rows)
    assert all(r.time_us_median > 0 for r in rows)                # timed first, then caught
    assert evaluate(rows, clean, GATE).exit_code == 1


def test_both_oom_spellings_are_reported_as_cuda_out_of_memory():
    from harness.measure.runner import describe_error

    classes = {torch.cuda.OutOfMemoryError,
               getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)}
    for cls in classes:                      # one class on torch >= 2.5, torch.cuda's before
        msg = describe_error(cls("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail"))
        assert msg == "CUDA out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.fixture()
def commit(monkeypatch):
    monkeypatch.setenv("HARNESS_COMMIT", "reliability")
    return "reliability"


def test_bench_records_an_oom_case_as_error_and_exits_1_even_without_baseline(tmp_path, commit,
                                                                              capsys):
    """End to end: the planted OOM hits one case of a real ``harness bench --cpu`` sweep."""
    out = tmp_path / "results"
    args = ["bench", "--cpu", "--matrix", "smoke", "--paths", "native_int4,fp16_cache",
            "--out", str(out), "--baselines", str(tmp_path / "baselines"), "--no-progress"]
    args += [a for k, v in FAST.items() for a in ("--set", f"{k}={v}")]
    with swapped_path("native_int4", lambda p: FaultPath(p, "oom", when=lambda M, i: M == 16)):
        rc = main(args)
    text = capsys.readouterr().out
    assert rc == 1
    assert "ERROR M16-N256-K512-gK-s4 native_int4 cpu: error: CUDA out of memory" in text
    rows = {(r.case_id, r.path): r for r in read_rows(out / commit / "cpu" / "smoke.csv")}
    assert len(rows) == 4 * 2 + 3       # 4 GEMMs x 2 paths; the SwiGLU pair: 2 pairs + fused native
    assert rows[("M16-N256-K512-gK-s4", "native_int4")].status == "error"
    assert all(r.status == "ok" for k, r in rows.items()
               if k != ("M16-N256-K512-gK-s4", "native_int4"))
    assert load_all().get("native_int4").__class__.__name__ == "NativeInt4Path"   # swap undone


# --------------------------------------------------------------------------- stream escape
def test_work_left_on_a_side_stream_is_reported_not_timed():
    """The stream-escape logic (the GPU test plants a real side stream)."""
    tails = iter([(100.0, 5000.0), (100.0, 4800.0)])
    why = escaped_work(lambda: next(tails))
    assert why and "work outside the timed stream" in why and "4800 us" in why
    assert escaped_work(lambda: (3000.0, 40.0)) is None                # a normal batch
    hiccup = iter([(100.0, 5000.0), (100.0, 30.0)])                    # one host hiccup
    assert escaped_work(lambda: next(hiccup)) is None
    assert escaped_work(lambda: (10_000.0, 1500.0)) is None           # tail < 20% of the batch


# --------------------------------------------------------------------------- interruptions
SWEEP = ["--cpu", "--matrix", "smoke", "--filter", "M <= 16",
         "--paths", "native_int4,fp16_cache,marlin_asym",
         "--no-progress", "--no-compare", "--set", "warmup_ms=1", "--set", "max_case_seconds=0.08",
         "--set", "min_samples=5", "--set", "max_samples=100000",
         "--set", "target_rel_spread=0.000001"]
TOTAL = 10                       # 2 GEMM cases x 3 paths + the pair (3 pair paths + fused) x 1 mode
#: Columns that depend on timing (or on the measured ceilings); everything else must be equal.
TIMING = {"time_us_median", "time_us_iqr", "time_us_ci_lo", "time_us_ci_hi", "n_samples",
          "samples_us", "clock_start_mhz", "clock_end_mhz", "clock_dropped", "tflops", "gbps",
          "roofline_floor_us", "pct_roofline", "marlin_only_us", "correction_overhead_pct",
          "prepare_seconds"}


def _stable(row) -> dict:
    d = {k: v for k, v in row.to_dict().items() if k not in TIMING}
    return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _default_signals():
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _data_lines(csv_path: Path) -> int:
    try:
        text = csv_path.read_text()
    except FileNotFoundError:
        return 0
    return max(0, text.count("\n") - 1)


@pytest.mark.slow
def test_interrupted_sweeps_keep_their_rows_and_resume_to_the_same_csv(tmp_path, commit, capsys):
    env = dict(os.environ, HARNESS_COMMIT=commit)
    sigs = {"term": signal.SIGTERM, "kill": signal.SIGKILL, "int": signal.SIGINT}
    procs = {name: subprocess.Popen([sys.executable, "-m", "harness", "bench", *SWEEP, "--out",
                                     str(tmp_path / name)], cwd=tmp_path, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=_default_signals)
             for name in sigs}
    csvs = {name: tmp_path / name / commit / "cpu" / "smoke.csv" for name in sigs}
    try:
        stopped: set[str] = set()
        deadline = time.monotonic() + 120
        while len(stopped) < len(procs):           # freeze each one mid-sweep (>= 2 rows)
            assert time.monotonic() < deadline, {n: p.poll() for n, p in procs.items()}
            for name, p in procs.items():
                if name not in stopped and _data_lines(csvs[name]) >= 2:
                    p.send_signal(signal.SIGSTOP)
                    stopped.add(name)
                assert p.poll() is None, (name, p.communicate())
            time.sleep(0.005)
        before = {name: read_rows(csvs[name]) for name in sigs}      # every row on disk is whole
        assert all(2 <= len(r) < TOTAL for r in before.values()), {
            n: len(r) for n, r in before.items()}

        # A second writer of the same results directory gets a clear lock message.
        rc = main(["bench", *SWEEP, "--out", str(tmp_path / "term"), "--resume"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.count("\n") == 0
        assert f"being written by another harness process (pid {procs['term'].pid} " in err
        assert [r.key for r in read_rows(csvs["term"])] == [r.key for r in before["term"]]

        for name, p in procs.items():
            p.send_signal(signal.SIGCONT)
            p.send_signal(sigs[name])
        results = {name: (p.wait(timeout=60), p.communicate()[1]) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    assert results["term"][0] == 128 + signal.SIGTERM and "--resume" in results["term"][1]
    assert results["int"][0] == 130 and "interrupted" in results["int"][1]
    assert results["kill"][0] == -signal.SIGKILL
    assert (csvs["kill"].parent / LOCK_NAME).exists()           # a killed holder leaves it ...
    assert not (csvs["term"].parent / LOCK_NAME).exists()       # ... a terminated one does not
    after_signal = {name: read_rows(csvs[name]) for name in sigs}
    for name in sigs:
        assert len(after_signal[name]) >= len(before[name])     # rows finished before exiting
        assert len(after_signal[name]) < TOTAL
    with open(csvs["kill"], "a") as fh:                          # as if killed inside a row write
        fh.write("smoke,M17-N512-K256-g128-s4,nat")

    assert main(["bench", *SWEEP, "--out", str(tmp_path / "ref")]) == 0
    ref = read_rows(tmp_path / "ref" / commit / "cpu" / "smoke.csv")
    assert len(ref) == TOTAL and all(r.status == "ok" for r in ref)
    for name in sigs:
        assert main(["bench", *SWEEP, "--out", str(tmp_path / name), "--resume"]) == 0
        final = read_rows(csvs[name])
        assert [r.key for r in final] == [r.key for r in ref], name
        assert [_stable(r) for r in final] == [_stable(r) for r in ref], name
        kept = {r.key: r.to_dict() for r in final}
        for r in after_signal[name]:                             # finished rows were not redone
            assert kept[r.key]["samples_us"] == r.samples_us
    assert "resuming" in capsys.readouterr().out


def test_atomic_writes_survive_a_crash_in_the_middle(tmp_path):
    """A process dying between writing the temp file and the rename leaves the old file."""
    target = tmp_path / "smoke.csv"
    target.write_text(",".join(column_names()) + "\n")
    code = textwrap.dedent(f"""
        import os
        from harness.results import store
        os.replace = lambda src, dst: os._exit(9)     # dies right before the rename
        store.atomic_write_text({str(target)!r}, "half written\\n")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 9
    assert target.read_text() == ",".join(column_names()) + "\n"
    leftovers = [p.name for p in tmp_path.iterdir() if p != target]
    assert leftovers and all(n.startswith(".smoke.csv.") and n.endswith(".tmp") for n in leftovers)
    from harness.results.store import find_result_csvs
    assert find_result_csvs(tmp_path) == [target]                  # the temp file is no result
