"""Two runners of one arch with different GPU models (a pull request measured on another
machine than its baseline): the gates (``harness bench``'s and ``ppl``'s, ``report
--baseline``, ``compare``) judge accuracy, NaN, dispatch and determinism across the two,
and call no timing verdict (TIMING_NOT_COMPARABLE, never SLOWER or FASTER); another arch
is still refused, ``--strict-env`` refuses the GPU model too, and comparisons of timings
alone (A/A calibration, accept's diff) still refuse another model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.cli import main
from harness.commands.common import gate_against_baseline
from harness.config import load_settings
from harness.engines.baseline_accept import accept
from harness.reports.gate import FAILING, Verdict, evaluate
from harness.reports.synthetic import make_rows, resample
from harness.reports.verdicts import MEANINGS
from harness.results.environment import (
    ENV_NOTE_PREFIX,
    TIMING_CONSEQUENCE,
    Environment,
    IncompatibleBaselineError,
    check_environment,
    check_gate_environment,
)
from harness.results.store import RunMeta, load_run, write_run

S = load_settings("default")
SETTINGS = S.to_dict()
H200 = Environment(arch="sm90", gpu_name="NVIDIA H200", compute_capability="9.0",
                   torch="2.11.0+cu130", cuda="13.0", driver="580.1", host="runner-a",
                   gpu_uuid="GPU-aaaa", commit="a" * 40)
H100 = replace(H200, gpu_name="NVIDIA H100 80GB HBM3", host="runner-b", gpu_uuid="GPU-bbbb",
               commit="b" * 40)
MODEL = "GPU model differs: baseline 'NVIDIA H200', this run 'NVIDIA H100 80GB HBM3'"
M1, M16 = "M1-N2048-K2048-g128-s0", "M16-N2048-K2048-g128-s0"


# --------------------------------------------------------------------------- the policy
def test_another_model_of_the_arch_is_compared_without_timing():
    check = check_gate_environment(H200, H100, SETTINGS, SETTINGS)
    assert check.timing_reason == MODEL and not check.timing_comparable
    assert check.warnings == (MODEL + TIMING_CONSEQUENCE,)
    assert "\n" not in check.warnings[0] and "TIMING_NOT_COMPARABLE" in check.warnings[0]
    # other software versions still warn after it
    newer = check_gate_environment(H200, replace(H100, driver="590.0"))
    assert newer.warnings[1] == "driver differs: baseline 580.1, this run 590.0"
    # the same model on another host: nothing to say
    same = check_gate_environment(H200, replace(H200, host="runner-c", gpu_uuid="GPU-cccc"))
    assert same.timing_comparable and same.warnings == ()
    # CPU runs on other processors: their timings are information anyway
    cpu = Environment(arch="cpu", gpu_name="Intel Xeon")
    assert check_gate_environment(cpu, replace(cpu, gpu_name="AMD EPYC")).timing_comparable


def test_strict_another_arch_and_timing_alone_still_refuse():
    with pytest.raises(IncompatibleBaselineError) as exc:
        check_gate_environment(H200, H100, strict=True)
    msg = str(exc.value)
    assert "\n" not in msg and "(--strict-env)" in msg and MODEL in msg
    with pytest.raises(IncompatibleBaselineError) as exc:
        check_gate_environment(H200, replace(H100, arch="sm89", gpu_name="NVIDIA L40S"))
    assert "\n" not in str(exc.value) and "arch differs: baseline sm90, this run sm89" in str(
        exc.value)
    with pytest.raises(IncompatibleBaselineError, match="setting warmup_ms differs"):
        check_gate_environment(H200, H100, SETTINGS, {**SETTINGS, "warmup_ms": 1.0})
    with pytest.raises(IncompatibleBaselineError, match="GPU model differs"):
        check_environment(H200, H100)              # noise margins, A/A: timing alone


# --------------------------------------------------------------------------- the gate
@pytest.fixture(scope="module")
def base():
    return make_rows(shapes=((2048, 2048, 128),), ms=(1, 16, 64), seed=3)


def _regressed(base, *, accuracy: bool):
    """The H100 run: every timing moved (20% slower, 15% faster), and optionally one row
    less accurate, one with NaN outputs, one that lost Marlin's dispatch."""
    rows = {r.key: r for r in resample(base, seed=9, factor={"fp16_cache": 1.2,
                                                              "native_int4": 0.85})}
    if accuracy:
        k = (M1, "native_int4", "graph")
        rows[k] = replace(rows[k], rel_err=rows[k].rel_err * 3)            # LESS_ACCURATE
        k = (M1, "marlin_asym", "graph")
        rows[k] = replace(rows[k], nonfinite=4)                            # WORSE_ACCURACY
        for path in ("native_int4", "fp16_cache", "marlin_asym", "tinygemm"):
            k = (M16, path, "graph")
            rows[k] = replace(rows[k], dispatch_path="native_int4", fallback_reason="rc=2")
    return list(rows.values())


def test_accuracy_fails_and_timing_is_never_slower_or_faster(base):
    check = check_gate_environment(H200, H100)
    calls: list = []
    result = evaluate(_regressed(base, accuracy=True), base, S, timing_reason=check.timing_reason,
                      remeasure=lambda keys: calls.append(keys) or [])
    got = {v.key: v for v in result.verdicts}
    assert got[(M1, "native_int4", "graph")].verdict == Verdict.LESS_ACCURATE
    assert got[(M1, "marlin_asym", "graph")].verdict == Verdict.WORSE_ACCURACY
    assert got[(M16, "marlin_asym", "graph")].verdict == Verdict.LOST_DISPATCH
    speed = {Verdict.SLOWER, Verdict.FASTER, Verdict.AMBIGUOUS, Verdict.SAME}
    assert not speed & {v.verdict for v in result.verdicts}
    slow = got[("M64-N2048-K2048-g128-s0", "fp16_cache", "graph")]
    assert slow.verdict == Verdict.TIMING_NOT_COMPARABLE and not slow.fails
    assert slow.reason == f"timing not compared: {MODEL}"
    assert slow.cur_median_us > slow.base_median_us * 1.1        # the times are still shown
    assert result.exit_code == 1 and calls == []                 # nothing to re-measure
    assert {v.verdict for v in result.failures} == {Verdict.LESS_ACCURATE, Verdict.LOST_DISPATCH,
                                                    Verdict.WORSE_ACCURACY}
    assert Verdict.TIMING_NOT_COMPARABLE not in FAILING
    assert "not judged" in MEANINGS[Verdict.TIMING_NOT_COMPARABLE]
    # the same rows on the same model: the timing moves are called
    same = evaluate(_regressed(base, accuracy=False), base, S)
    assert {Verdict.SLOWER, Verdict.FASTER} <= {v.verdict for v in same.verdicts}
    assert same.exit_code == 1


def test_nondeterminism_still_holds_across_models(base):
    k = (M16, "native_int4", "graph")
    rows = {r.key: r for r in resample(base, seed=4)}
    rows[k] = replace(rows[k], accuracy_runs=5, distinct_outputs=2, worst_rel_err=rows[k].rel_err)
    result = evaluate(list(rows.values()), base, S, timing_reason=MODEL)
    assert {v.key: v for v in result.verdicts}[k].verdict == Verdict.NONDETERMINISTIC
    assert result.exit_code == 1


def test_the_bench_gate_across_models(tmp_path, base):
    from harness.results.baseline import BaselineMeta, write_baseline_matrix

    write_baseline_matrix(tmp_path / "baselines" / "sm90", base,
                          BaselineMeta("synthetic", "sm90", H200, rows_sha256="",
                                       settings=SETTINGS))

    def gate(rows, strict=False):
        write_run(tmp_path / "run", rows, RunMeta(matrix="synthetic", environment=H100,
                                                  settings=SETTINGS))
        out: list[str] = []
        code = gate_against_baseline(
            rows, "synthetic", command="harness bench", run_dir=tmp_path / "run",
            baselines=tmp_path / "baselines", arch="sm90", env=H100, settings=S,
            measured=SETTINGS, strict_env=strict, echo=out.append)
        return code, out

    code, out = gate(_regressed(base, accuracy=False))
    assert code == 0                       # 20% slower on another model is not SLOWER
    assert f"harness bench: {ENV_NOTE_PREFIX}{MODEL}{TIMING_CONSEQUENCE}" in out
    table = "\n".join(out[1:-1]).splitlines()
    assert not [line for line in table if line.startswith(("SLOWER", "FASTER", "AMBIGUOUS"))]
    assert "TIMING_NOT_COMPARABLE" in out[-1] and "exit 0" in out[-1]
    code, out = gate(_regressed(base, accuracy=True))
    assert code == 1
    with pytest.raises(IncompatibleBaselineError, match="--strict-env"):
        gate(_regressed(base, accuracy=False), strict=True)


# --------------------------------------------------------------------------- stored runs
def _run(tmp_path, name, rows, env):
    meta = RunMeta(matrix="synthetic", commit=env.commit, arch=env.arch, environment=env,
                   settings=SETTINGS, extra={"modes": ["graph"]})
    write_run(tmp_path / name, rows, meta)
    return tmp_path / name


def test_report_and_compare_of_stored_runs_on_two_models(tmp_path, base, capsys):
    accept(load_run(_run(tmp_path, "h200", base, H200)), tmp_path / "baselines", S,
           echo=lambda s: None)
    _run(tmp_path, "h100-ok", _regressed(base, accuracy=False), H100)
    _run(tmp_path, "h100-bad", _regressed(base, accuracy=True), H100)
    _run(tmp_path, "l40s", base, replace(H100, arch="sm89", gpu_name="NVIDIA L40S"))
    baselines = str(tmp_path / "baselines")

    def report(run, *extra):
        return main(["report", str(tmp_path / run), "--baseline", baselines,
                     "--out", str(tmp_path / f"rep-{run}"), *extra])

    assert report("h100-ok") == 0
    md = (tmp_path / "rep-h100-ok" / "report.md").read_text()
    header = md[:md.index("Preset `")]
    assert f"{ENV_NOTE_PREFIX}{MODEL}" in header               # one line in the header
    assert "15 TIMING_NOT_COMPARABLE" in md and "🐢" not in md and "🚀" not in md
    assert report("h100-bad") == 1
    assert "LESS_ACCURATE" in (tmp_path / "rep-h100-bad" / "report.md").read_text()
    capsys.readouterr()
    assert report("h100-ok", "--strict-env") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(--strict-env)" in err and "GPU model differs" in err
    assert report("l40s", "--arch", "sm90") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "arch differs: baseline sm90, this run sm89" in err
    # harness compare A B: the same policy, A as the baseline side
    a, ok, bad = (str(tmp_path / n) for n in ("h200", "h100-ok", "h100-bad"))
    assert main(["compare", a, ok, "--out", str(tmp_path / "cmp-ok")]) == 0
    assert main(["compare", a, bad, "--out", str(tmp_path / "cmp-bad")]) == 1
    text = (tmp_path / "cmp-bad" / "compare.md").read_text()
    assert "GPU model differs" in text and "🐢" not in text and "🚀" not in text
    assert "1 WORSE_ACCURACY, 1 LESS_ACCURATE, 1 LOST_DISPATCH, 12 TIMING_NOT_COMPARABLE" in text
    capsys.readouterr()
    assert main(["compare", a, str(tmp_path / "l40s"), "--out", str(tmp_path / "cmp-x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "arch differs" in err
