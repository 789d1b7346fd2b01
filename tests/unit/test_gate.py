"""The regression gate on synthetic results: every verdict, noise behaviour, re-measure,
environment refusal, baselines (accept / calibrate)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from harness.config import load_settings
from harness.engines.aa_baselines import calibrate
from harness.engines.baseline_accept import accept
from harness.reports.gate import FAILING, Verdict, evaluate
from harness.reports.stats import noise_margins, speed_call, with_samples
from harness.reports.synthetic import make_rows, resample
from harness.results.baseline import load_baseline, read_baseline_matrix
from harness.results.environment import (
    Environment,
    IncompatibleBaselineError,
    check_compatible,
    incompatibility,
)
from harness.results.schema import SchemaError
from harness.results.store import RunMeta, load_run, write_run

S = load_settings("default")


def _one(result, case_id, path, mode="graph"):
    matches = [v for v in result.verdicts if v.key == (case_id, path, mode)]
    assert len(matches) == 1, (case_id, path, mode)
    return matches[0]


@pytest.fixture(scope="module")
def base():
    return make_rows(shapes=((2048, 2048, 128),), ms=(1, 16, 64), seed=3)


def test_aa_is_all_same_and_passes(base):
    cur = resample(base, seed=11)
    result = evaluate(cur, base, S)
    assert {v.verdict for v in result.verdicts} == {Verdict.SAME}
    assert result.exit_code == 0 and result.passed
    assert len(result.verdicts) == len(base)


def test_every_verdict_is_reachable(base):
    cur = {r.key: r for r in resample(base, seed=5)}
    m16, m64, m1 = "M16-N2048-K2048-g128-s0", "M64-N2048-K2048-g128-s0", "M1-N2048-K2048-g128-s0"
    # SLOWER and FASTER: 10% either way on stable samples
    k = (m16, "native_int4", "graph")
    cur[k] = with_samples(cur[k], np.array(cur[k].samples()) * 1.10)
    k = (m16, "fp16_cache", "graph")
    cur[k] = with_samples(cur[k], np.array(cur[k].samples()) * 0.90)
    # AMBIGUOUS: +10% but only three samples, so no test is possible
    k = (m64, "native_int4", "graph")
    cur[k] = with_samples(cur[k], np.array(cur[k].samples()[:3]) * 1.10)
    # WORSE_ACCURACY: rel_err over the gate
    k = (m64, "fp16_cache", "graph")
    cur[k] = replace(cur[k], rel_err=5e-3)
    # LESS_ACCURATE: rel_err tripled against the baseline, still inside the gate (a case of
    # its own, in both builds, with identical samples)
    m40 = "M40-N2048-K2048-g128-s0"
    less_base = replace(next(r for r in base if r.key == (m64, "marlin_asym", "graph")),
                        case_id=m40, M=40, rel_err=3e-4)
    cur[less_base.key] = replace(less_base, rel_err=9e-4)            # inside the 1e-3 gate
    # NONDETERMINISTIC: a path that promises identical outputs gave two in five runs (a
    # case of its own, in both builds)
    m48 = "M48-N2048-K2048-g128-s0"
    extra = replace(cur[(m64, "native_int4", "graph")], case_id=m48, M=48)
    cur[extra.key] = replace(extra, accuracy_runs=5, distinct_outputs=2,
                             worst_rel_err=extra.rel_err)
    # LOST_DISPATCH: the dispatcher no longer picks Marlin for M=16
    for path in ("native_int4", "fp16_cache", "marlin_asym", "tinygemm"):
        kk = (m16, path, "graph")
        cur[kk] = replace(cur[kk], dispatch_path="native_int4", fallback_reason="marlin rc=2")
    # ERROR, MISSING (gone), MISSING (unavailable now), NEW
    k = (m1, "marlin_asym", "graph")
    cur[k] = replace(cur[k], status="error", error="KernelReturnCode rc=2")
    del cur[(m1, "fp16_cache", "graph")]
    k = (m1, "native_int4", "graph")
    cur[k] = replace(cur[k], status="unavailable", error="no CUDA device")
    new = replace(base[0], case_id="M32-N2048-K2048-g128-s0", M=32)
    cur[new.key] = new
    result = evaluate(list(cur.values()), [*base, extra, less_base], S)
    got = {v.key: v for v in result.verdicts}
    assert got[(m16, "native_int4", "graph")].verdict == Verdict.SLOWER
    assert got[(m16, "fp16_cache", "graph")].verdict == Verdict.FASTER
    assert got[(m64, "native_int4", "graph")].verdict == Verdict.AMBIGUOUS
    assert got[(m64, "fp16_cache", "graph")].verdict == Verdict.WORSE_ACCURACY
    assert got[less_base.key].verdict == Verdict.LESS_ACCURATE
    assert got[extra.key].verdict == Verdict.NONDETERMINISTIC
    assert got[(m16, "marlin_asym", "graph")].verdict == Verdict.LOST_DISPATCH
    assert got[(m1, "marlin_asym", "graph")].verdict == Verdict.ERROR
    assert got[(m1, "fp16_cache", "graph")].verdict == Verdict.MISSING
    assert got[(m1, "native_int4", "graph")].verdict == Verdict.MISSING
    assert got[new.key].verdict == Verdict.NEW
    # WINNER_CHANGED: fp16_cache led M64 in the baseline and is no longer correct there
    # (WORSE_ACCURACY above), so marlin_asym is now the fastest correct path of the class
    changed = got[(m64, "marlin_asym", "graph")]
    assert changed.verdict == Verdict.WINNER_CHANGED and not changed.fails
    assert "fp16_cache led" in changed.reason
    # TIMING_NOT_COMPARABLE needs two GPU models: tests/unit/test_cross_model_gate.py
    assert {v.verdict for v in result.verdicts} == set(Verdict) - {Verdict.TIMING_NOT_COMPARABLE}
    # LOST_DISPATCH sits on the Marlin row only, not on every path of the case
    assert got[(m16, "fp16_cache", "graph")].verdict == Verdict.FASTER
    assert "marlin rc=2" in got[(m16, "marlin_asym", "graph")].reason
    # exit status: failing verdicts fail, FASTER / AMBIGUOUS / NEW do not
    assert result.exit_code == 1
    assert {v.verdict for v in result.failures} == set(FAILING) - {Verdict.WINNER_CHANGED}
    for v in result.verdicts:       # WINNER_CHANGED fails only with fail_on_winner_change
        assert v.fails == (v.verdict in FAILING and v.role == "path"
                           and v.verdict != Verdict.WINNER_CHANGED)
    # regressions come first
    flags = [v.fails for v in result.verdicts]
    assert flags == sorted(flags, reverse=True)


def test_accuracy_checks(base):
    key = ("M16-N2048-K2048-g128-s0", "marlin_asym", "graph")
    b = next(r for r in base if r.key == key)
    others = [r for r in base if r.key != key]
    for bad in (replace(b, nonfinite=3), replace(b, nonfinite=3, rel_err=math.inf,
                                                 rms_ulp_p99=math.inf, rms_ulp_max=math.inf)):
        for baseline in (base, []):
            v = _one(evaluate(others + [bad], baseline, S), *key)
            assert v.verdict == Verdict.WORSE_ACCURACY and v.fails and "non-finite" in v.reason
            assert not any("grew" in r for r in v.reasons)      # no growth on NaN/Inf output
    over = replace(b, rel_err=5e-3)                  # over the absolute bound: WORSE first
    v = _one(evaluate(others + [over], base, S), *key)
    assert v.verdict == Verdict.WORSE_ACCURACY and "over the gate" in v.reason
    assert any(r.startswith("rel_err 0.005 grew") for r in v.reasons)     # also listed


def test_per_element_ulps_are_detail_not_gated(base):
    # measured on the H200: a changed (equally exact) summation order moved a near-cancelling
    # element's max ULP 8392.53 -> 8396.53 at unchanged rel_err; any per-element change at
    # unchanged rel_err and rms-ULP passes now, and is still reported as a delta
    key = ("M16-N2048-K2048-g128-s0", "marlin_asym", "graph")
    b = replace(next(r for r in base if r.key == key), max_ulp=8392.53, p99_ulp=89.7)
    others = [r for r in base if r.key != key]
    cur = replace(b, max_ulp=320960.0, p99_ulp=173.7)
    v = _one(evaluate(others + [cur], others + [b], S), *key)
    assert v.verdict == Verdict.SAME and not v.fails, v.reasons
    assert v.delta_max_ulp == pytest.approx(320960.0 - 8392.53)
    assert v.delta_p99_ulp == pytest.approx(84.0)
    assert v.delta_rms_ulp_p99 == 0.0


def _less(base, settings=S, **cur_fields):
    key = ("M16-N2048-K2048-g128-s0", "marlin_asym", "graph")
    # marlin_asym's documented bound (kernels/bounds.py) on both sides
    b = replace(next(r for r in base if r.key == key), rel_err=4e-4, rms_ulp_p99=2.0,
                rms_ulp_max=9.0, rel_err_bound=2.5e-3)
    base_fields = {k[5:]: cur_fields.pop(k) for k in list(cur_fields) if k.startswith("base_")}
    b = replace(b, **base_fields)
    others = [r for r in base if r.key != key]
    return _one(evaluate(others + [replace(b, **cur_fields)], others + [b], settings), *key)


def test_tripled_rel_err_inside_the_bound_is_less_accurate(base):
    assert S.rel_err_growth == 0.10 and S.rms_ulp_slack == 0.25 and S.rms_ulp_growth == 0.10
    v = _less(base, rel_err=1.2e-3)                 # over rel_err_gate, inside Marlin's bound
    assert v.verdict == Verdict.LESS_ACCURATE and v.fails, v.reasons
    assert v.reasons[0] == ("rel_err 0.0012 grew +200% over baseline 0.0004 "
                            "(allowed +10%, rel_err_growth)")
    assert _less(base, rel_err=3e-3).verdict == Verdict.WORSE_ACCURACY           # over the bound
    assert v.delta_rel_err == pytest.approx(8e-4)
    peer = _less(base, rel_err=1.2e-3, role="peer")              # peers are informational
    assert peer.verdict == Verdict.LESS_ACCURATE and not peer.fails


def test_rms_ulp_growth_uses_the_larger_of_slack_and_fraction(base):
    # baseline rms_ulp_p99 2.0: allowed + max(0.25, 0.10 x 2.0) = 0.25
    assert _less(base, rms_ulp_p99=2.25).verdict == Verdict.SAME
    v = _less(base, rms_ulp_p99=2.3)
    assert v.verdict == Verdict.LESS_ACCURATE and v.fails
    assert v.reason.startswith("rms_ulp_p99 2.3 > baseline 2 + 0.25")
    assert v.delta_rms_ulp_p99 == pytest.approx(0.3)
    # baseline 10: allowed + max(0.25, 1.0) = 1.0
    assert _less(base, base_rms_ulp_p99=10.0, rms_ulp_p99=10.9).verdict == Verdict.SAME
    assert _less(base, base_rms_ulp_p99=10.0, rms_ulp_p99=11.1).verdict == Verdict.LESS_ACCURATE
    # the planted fp16 accumulation, emulated (docs/reliability.md §3): 2.09 -> 12.6
    assert _less(base, base_rms_ulp_p99=2.09, rms_ulp_p99=12.6).verdict == Verdict.LESS_ACCURATE
    # rms_ulp_max is reported, not gated
    assert _less(base, rms_ulp_max=90.0).verdict == Verdict.SAME


def test_growth_within_tolerance_passes(base):
    v = _less(base, rel_err=4e-4 * 1.09, rms_ulp_p99=2.2)
    assert v.verdict == Verdict.SAME and not v.fails, v.reasons
    assert _less(base, rel_err=4e-4 * 0.5, rms_ulp_p99=1.0).verdict == Verdict.SAME    # better
    # strict is tighter (5%, 0.1 ULP), permissive looser (25%, 0.5 ULP)
    strict, permissive = load_settings("strict"), load_settings("permissive")
    assert (strict.rel_err_growth, strict.rms_ulp_slack, strict.rms_ulp_growth) == (0.05, 0.1, 0.05)
    assert (permissive.rel_err_growth, permissive.rms_ulp_slack,
            permissive.rms_ulp_growth) == (0.25, 0.5, 0.25)
    assert _less(base, strict, rel_err=4e-4 * 1.07).verdict == Verdict.LESS_ACCURATE
    assert _less(base, strict, rms_ulp_p99=2.15).verdict == Verdict.LESS_ACCURATE
    assert _less(base, permissive, rel_err=4e-4 * 1.2, rms_ulp_p99=2.45).verdict == Verdict.SAME


def test_a_baseline_without_rms_ulps_is_not_compared_on_them(base):
    # a schema-2 baseline reads rms_ulp_* as NaN: no comparison and nothing said about it
    v = _less(base, base_rms_ulp_p99=math.nan, base_rms_ulp_max=math.nan, rms_ulp_p99=50.0)
    assert v.verdict == Verdict.SAME and not any("rms_ulp" in r for r in v.reasons), v.reasons
    assert math.isnan(v.delta_rms_ulp_p99)
    # rel_err is still compared against such a baseline
    v = _less(base, base_rms_ulp_p99=math.nan, rel_err=1.2e-3)
    assert v.verdict == Verdict.LESS_ACCURATE and "rel_err" in v.reason
    # nor the other way round (a current row without them), nor a NaN baseline rel_err
    assert _less(base, rms_ulp_p99=math.nan).verdict == Verdict.SAME
    assert _less(base, base_rel_err=math.nan, rel_err=1.2e-3).verdict == Verdict.SAME
    # and without a baseline row there is nothing to grow from
    row = replace(base[0], rel_err=9e-4, rms_ulp_p99=40.0)
    assert evaluate([row], [], S).verdicts[0].verdict == Verdict.NEW


def test_a_baseline_row_exact_to_zero_fails_on_any_error(base):
    v = _less(base, base_rel_err=0.0, rel_err=1e-6)
    assert v.verdict == Verdict.LESS_ACCURATE and "grew from 0" in v.reason
    assert _less(base, base_rel_err=0.0, rel_err=0.0).verdict == Verdict.SAME


def test_ppl_drift():
    row = make_rows(shapes=((2048, 2048, 128),), ms=(16,), paths=("marlin_asym",), peers=())[0]
    b = replace(row, kind="ppl", case_id="ppl-model", mode="model", ppl=8.9755, samples_us="",
                n_samples=0)
    ok = replace(b, ppl=8.9755 * 1.005)
    bad = replace(b, ppl=8.9755 * 1.02)
    assert _one(evaluate([ok], [b], S), "ppl-model", "marlin_asym", "model").verdict == Verdict.SAME
    v = _one(evaluate([bad], [b], S), "ppl-model", "marlin_asym", "model")
    assert v.verdict == Verdict.WORSE_ACCURACY and "PPL" in v.reason
    assert v.ppl_drift == pytest.approx(0.02)
    # drift between paths (the seed: Marlin 0.67 % from native) against the same tolerance
    seed_like = replace(b, ppl_drift_vs_native=-0.0067)
    v = _one(evaluate([seed_like], [b], S), "ppl-model", "marlin_asym", "model")
    assert v.verdict == Verdict.SAME
    far = replace(b, ppl_drift_vs_native=0.015)
    v = _one(evaluate([far], [], S), "ppl-model", "marlin_asym", "model")
    assert v.verdict == Verdict.WORSE_ACCURACY and "vs native" in v.reason


def test_new_rows_still_get_absolute_accuracy_checks(base):
    result = evaluate([replace(base[0], rel_err=2e-3)] + base[1:], [], S)
    assert result.verdicts[0].verdict == Verdict.WORSE_ACCURACY and result.exit_code == 1
    assert {v.verdict for v in result.verdicts[1:]} == {Verdict.NEW}
    assert evaluate(base, [], S).exit_code == 0


def test_five_percent_slowdown_of_stable_cases_is_slower():
    base = make_rows(shapes=((2048, 2048, 128), (6144, 2048, 2048)), ms=(1, 16, 64, 256), seed=1)
    caught = 0
    for seed in range(20):
        result = evaluate(resample(base, seed=100 + seed, factor={"marlin_asym": 1.05}), base, S)
        marlin = [v for v in result.verdicts if v.path == "marlin_asym"]
        assert all(v.time_change == pytest.approx(0.05, abs=0.01) for v in marlin)
        caught += all(v.verdict == Verdict.SLOWER for v in marlin)
        assert all(v.verdict == Verdict.SAME for v in result.verdicts if v.path != "marlin_asym")
    assert caught == 20


def test_aa_same_distribution_is_never_slower_over_200_trials():
    base = make_rows(shapes=((2048, 2048, 128),), ms=(1, 64), seed=2)
    significant_but_small = 0
    for trial in range(200):
        a = resample(base, seed=10_000 + trial)
        b = resample(base, seed=20_000 + trial)
        result = evaluate(b, a, S)
        verdicts = {v.verdict for v in result.verdicts}
        assert Verdict.SLOWER not in verdicts and Verdict.FASTER not in verdicts, trial
        assert result.exit_code == 0
        significant_but_small += sum(
            1 for v in result.verdicts if math.isfinite(v.p_value) and v.p_value < S.alpha)
    # the U test does fire at about its alpha rate; the effect-size threshold holds it back
    assert 0 < significant_but_small < 0.05 * 200 * len(base)


def test_noise_margin_raises_the_threshold(base):
    cur = resample(base, seed=9, factor={"marlin_asym": 1.05})
    margins = {r.key: 0.08 for r in base if r.path == "marlin_asym"}
    result = evaluate(cur, base, S, margins=margins)
    marlin = [v for v in result.verdicts if v.path == "marlin_asym"]
    assert all(v.verdict == Verdict.SAME and v.threshold == 0.08 for v in marlin)
    assert all("within" in v.reason for v in marlin)


def _ambiguous_setup(base):
    key = ("M64-N2048-K2048-g128-s0", "marlin_asym", "graph")
    cur = [with_samples(r, np.array(r.samples()[:3]) * 1.10) if r.key == key else r
           for r in resample(base, seed=4)]
    return key, cur


def test_ambiguous_is_remeasured_then_final(base):
    key, cur = _ambiguous_setup(base)
    assert _one(evaluate(cur, base, S), *key).verdict == Verdict.AMBIGUOUS
    calls = []

    def remeasure_slow(keys):
        calls.append(keys)
        return [r for r in resample(base, seed=77, factor={key: 1.10}) if r.key in keys]

    result = evaluate(cur, base, S, remeasure=remeasure_slow)
    assert calls == [[key]]
    v = _one(result, *key)
    assert v.verdict == Verdict.SLOWER and v.remeasured and result.exit_code == 1

    def remeasure_both(keys):  # the interleaved form: (baseline rows, current rows)
        return ([r for r in resample(base, seed=78) if r.key in keys],
                [r for r in resample(base, seed=79) if r.key in keys])

    v = _one(evaluate(cur, base, S, remeasure=remeasure_both), *key)
    assert v.verdict == Verdict.SAME and v.remeasured


def test_a_first_time_slower_is_confirmed_by_re_measurement(base):
    """A transient +4-6% (one measurement) clears on re-measurement; a real one stays."""
    key = base[0].key
    cur = resample(base, seed=90, factor={key: 1.06})
    assert _one(evaluate(cur, base, S), *key).verdict == Verdict.SLOWER
    calls = []

    def transient(keys):                       # the second measurement is back to normal
        calls.append(keys)
        return [r for r in resample(base, seed=91) if r.key in keys]

    result = evaluate(cur, base, S, remeasure=transient)
    v = _one(result, *key)
    assert calls == [[key]] and v.remeasured and v.verdict == Verdict.SAME
    assert any("first: SLOWER +" in r for r in v.reasons) and result.exit_code == 0

    def persistent(keys):
        return [r for r in resample(base, seed=92, factor={key: 1.06}) if r.key in keys]

    result = evaluate(cur, base, S, remeasure=persistent)
    v = _one(result, *key)
    assert v.verdict == Verdict.SLOWER and v.remeasured and v.fails and result.exit_code == 1


def test_ambiguous_without_hook_stays_and_does_not_fail(base):
    key, cur = _ambiguous_setup(base)
    result = evaluate(cur, base, S)
    assert _one(result, *key).verdict == Verdict.AMBIGUOUS
    assert result.exit_code == 0
    assert any("not re-measured" in n for n in result.notes)


def test_missing_baseline_rows_fail_unless_partial(base):
    cur = [r for r in resample(base, seed=1) if r.M != 64]
    result = evaluate(cur, base, S)
    missing = result.of(Verdict.MISSING)
    assert len(missing) == sum(1 for r in base if r.M == 64) and result.exit_code == 1
    assert evaluate(cur, base, S, partial=True).exit_code == 0


def test_peer_rows_are_informational(base):
    cur = resample(base, seed=2, factor={"tinygemm": 1.3})
    result = evaluate(cur, base, S)
    peers = [v for v in result.verdicts if v.path == "tinygemm"]
    assert all(v.verdict == Verdict.SLOWER and not v.fails for v in peers)
    assert result.exit_code == 0


def test_speed_call_rules():
    rng = np.random.default_rng(0)
    a = 10 * rng.lognormal(0, 0.005, 200)
    assert speed_call(a, a * 1.05, alpha=0.01, min_effect=0.03).call == "SLOWER"
    assert speed_call(a, a * 0.95, alpha=0.01, min_effect=0.03).call == "FASTER"
    assert speed_call(a, a * 1.01, alpha=0.01, min_effect=0.03).call == "SAME"  # significant, small
    assert speed_call(a[:3], a[:3] * 1.2, alpha=0.01, min_effect=0.03).call == "AMBIGUOUS"
    assert speed_call([], [], alpha=0.01, min_effect=0.03).call == "NONE"
    call = speed_call([], [], alpha=0.01, min_effect=0.03, base_median=10.0, cur_median=12.0)
    assert call.call == "AMBIGUOUS" and call.change == pytest.approx(0.2)


def test_noise_margins_percentile_and_floor():
    k1, k2 = ("c", "p", "graph"), ("d", "p", "graph")
    runs = [{k1: 100.0, k2: 50.0}, {k1: 102.0, k2: 50.1}, {k1: 98.0, k2: 50.0}]
    m = noise_margins(runs, floor=0.01)
    drifts = [0.02, 0.02, abs(98 / 102 - 1)]
    assert m[k1] == pytest.approx(float(np.percentile(drifts, 95)))
    assert m[k2] == 0.01  # floored
    with pytest.raises(ValueError, match="at least 2"):
        noise_margins(runs[:1], floor=0.01)


ENV = Environment(arch="sm90", gpu_name="NVIDIA H200", compute_capability="9.0",
                  torch="2.11.0+cu130", cuda="13.0", driver="580.1", commit="a" * 40)


@pytest.mark.parametrize("change, refused, warned", [
    (dict(arch="sm89"), "arch", ()), (dict(gpu_name="NVIDIA H100 80GB HBM3"), "GPU", ()),
    # another torch release or CUDA major version warns (refused only with strict)
    (dict(torch="2.13.0+cu130"), None, ("torch",)), (dict(cuda="12.4"), None, ("CUDA",)),
    (dict(torch="2.11.1"), None, ("torch",)),
    (dict(cuda="13.1", driver="590.0"), None, ("CUDA", "driver")),
    (dict(host="other", gpu_uuid="GPU-2", boot_id="b2"), None, ()),
])
def test_environment_compatibility(change, refused, warned):
    other = replace(ENV, **change)
    reason = incompatibility(ENV, other)
    if refused is None:
        assert reason is None
        warnings = check_compatible(ENV, other)
        assert [w.split(" differs")[0] for w in warnings] == list(warned)
    else:
        assert refused in reason
        with pytest.raises(IncompatibleBaselineError) as exc:
            check_compatible(ENV, other)
        assert "\n" not in str(exc.value) and refused in str(exc.value)


def _store(tmp_path, name, rows, env):
    meta = RunMeta(matrix=rows[0].matrix, commit=env.commit, arch=env.arch, environment=env)
    write_run(tmp_path / name, rows, meta)
    return load_run(tmp_path / name)


def test_accept_prints_diff_and_promotes(tmp_path, base):
    out: list[str] = []
    accept(_store(tmp_path, "r0", base, ENV), tmp_path / "baselines", S, echo=out.append)
    assert any("no previous baseline" in line for line in out)
    rows, meta = read_baseline_matrix(tmp_path / "baselines" / "sm90", "synthetic")
    assert len(rows) == len(base) and meta.environment.gpu_name == "NVIDIA H200"
    slower = resample(base, seed=3, factor={"marlin_asym": 1.2})
    out.clear()
    accept(_store(tmp_path, "r1", slower, ENV), tmp_path / "baselines", S, echo=out.append)
    text = "\n".join(out)
    assert "SLOWER" in text and "M16-N2048-K2048-g128-s0" in text
    rows, _ = read_baseline_matrix(tmp_path / "baselines" / "sm90", "synthetic")
    assert {r.key: r.time_us_median for r in rows} == {r.key: r.time_us_median for r in slower}
    assert list((tmp_path / "baselines" / "sm90").glob(".*")) == []  # no temp or lock files left


def test_half_promoted_baseline_is_detected(tmp_path, base):
    accept(_store(tmp_path, "r0", base, ENV), tmp_path / "b", S, echo=lambda s: None)
    csv_path = tmp_path / "b" / "sm90" / "synthetic.csv"
    csv_path.write_text(csv_path.read_text().replace("native_int4", "native_int5", 1))
    with pytest.raises(SchemaError, match="rows_sha256") as exc:
        load_baseline(tmp_path / "b" / "sm90")
    assert "\n" not in str(exc.value)


def test_calibrate_stores_margins(tmp_path, base):
    accept(_store(tmp_path, "r0", base, ENV), tmp_path / "b", S, echo=lambda s: None)
    key = ("M16-N2048-K2048-g128-s0", "marlin_asym", "graph")
    factors = (1.0, 1.04, 0.97, 1.01)
    paths = [tmp_path / f"aa{i}" for i in range(len(factors))]
    for i, f in enumerate(factors):
        _store(tmp_path, f"aa{i}", resample(base, seed=40 + i, factor={key: f}, noise=0.0005), ENV)
    margins = calibrate(paths, tmp_path / "b", S, echo=lambda s: None)["synthetic"]
    # the moved key gets a margin from its own spread (about 3%, moderated by its class),
    # far above the quiet rows of its class, which stay near the floor
    assert 0.03 < margins[key] < 0.30
    quiet = ("M16-N2048-K2048-g128-s0", "native_int4", "graph")
    assert margins[quiet] < 0.02 and margins[quiet] >= S.noise_margin_floor
    stored = load_baseline(tmp_path / "b" / "sm90")
    assert stored.margins[key] == pytest.approx(margins[key])
    assert stored.metas["synthetic"].calibration["runs"] == len(factors)
    # another commit among the A/A runs is refused
    _store(tmp_path, "other", base, replace(ENV, commit="b" * 40))
    with pytest.raises(ValueError, match="one commit"):
        calibrate(paths + [tmp_path / "other"], tmp_path / "b", S, echo=lambda s: None)


def test_wrong_arch_baseline_is_refused_by_report(tmp_path, base, capsys):
    from harness.cli import main

    accept(_store(tmp_path, "r0", base, ENV), tmp_path / "baselines", S, echo=lambda s: None)
    run = _store(tmp_path, "r89", [replace(r, arch="sm89") for r in base],
                 replace(ENV, arch="sm89", gpu_name="NVIDIA GeForce RTX 4090"))
    assert run.environment.arch == "sm89"
    rc = main(["report", str(tmp_path / "r89"), "--baseline", str(tmp_path / "baselines"),
               "--arch", "sm90", "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and "refusing" in err and "sm89" in err
    assert not (tmp_path / "rep").exists()


def test_eager_mode_slowdown_is_informational_unless_the_preset_gates_it():
    from dataclasses import replace

    from harness.config import load_settings
    from harness.reports.gate import judge_row
    from harness.results.schema import ResultRow

    rng = np.random.default_rng(5)

    def row(mode, scale):
        s = 100.0 * scale * rng.lognormal(0.0, 0.005, 200)
        return ResultRow(matrix="m", case_id="M1-N256-K256-g128-s0", path="fp16_cache", mode=mode,
                         M=1, N=256, K=256, group_size=128, time_us_median=float(np.median(s)),
                         n_samples=200, samples_us=";".join(f"{x:.4f}" for x in s), rel_err=1e-4)

    default = load_settings("default")
    for mode in ("cold", "cpu"):
        v = judge_row(row(mode, 1.10), row(mode, 1.0), default)
        assert v.verdict.value == "SLOWER" and not v.fails, v
        assert any("informational" in r for r in v.reasons)
    assert judge_row(row("graph", 1.10), row("graph", 1.0), default).fails
    strict = replace(default, gate_eager_speed=1)
    assert judge_row(row("cold", 1.10), row("cold", 1.0), strict).fails


def _varied(row, note="", runs=5, distinct=2, worst_rel=None):
    return replace(row, accuracy_runs=runs, distinct_outputs=distinct, nondeterminism_note=note,
                   worst_rel_err=row.rel_err if worst_rel is None else worst_rel,
                   worst_rel_fro_err=10 * row.rel_fro_err, worst_max_ulp=row.max_ulp + 1e5)


def test_a_path_that_promises_identical_outputs_fails_when_they_differ(base):
    cur = {r.key: r for r in resample(base, seed=11)}
    k = ("M16-N2048-K2048-g128-s0", "native_int4", "graph")
    cur[k] = _varied(cur[k])
    v = _one(evaluate(list(cur.values()), base, S), *k)
    assert v.verdict == Verdict.NONDETERMINISTIC and v.fails and v.nondeterministic
    assert "2 distinct outputs in 5 runs" in v.reason and "promises identical outputs" in v.reason


def test_documented_variation_is_reported_without_failing_unless_strict(base):
    cur = {r.key: r for r in resample(base, seed=11)}
    k = ("M16-N2048-K2048-g128-s0", "native_int4", "graph")
    cur[k] = _varied(cur[k], note="locks in the reduction")
    result = evaluate(list(cur.values()), base, S)
    v = _one(result, *k)
    assert v.verdict == Verdict.SAME and not v.fails and v.nondeterministic
    assert "expected for this path (locks in the reduction)" in v.reason
    assert result.passed
    from harness.reports.markdown import summary_line
    assert "1 rows varied between runs on identical inputs (native_int4)" in summary_line(result)
    strict = load_settings("default", overrides={"fail_on_nondeterminism": 1})
    v = _one(evaluate(list(cur.values()), base, strict), *k)
    assert v.verdict == Verdict.NONDETERMINISTIC and v.fails


def test_the_worst_run_is_held_to_the_rel_err_gate(base):
    cur = {r.key: r for r in resample(base, seed=11)}
    k = ("M16-N2048-K2048-g128-s0", "native_int4", "graph")
    cur[k] = _varied(cur[k], note="documented", worst_rel=5 * S.rel_err_gate)
    v = _one(evaluate(list(cur.values()), base, S), *k)
    assert v.verdict == Verdict.WORSE_ACCURACY and v.fails
    assert "the worst of 5 runs on identical inputs has rel_err" in v.reason
    # a schema-1 row (accuracy_runs 0, distinct 0) is judged as before
    old = replace(cur[k], accuracy_runs=0, distinct_outputs=0, worst_rel_err=math.nan)
    assert _one(evaluate([old], [r for r in base if r.key == k], S), *k).verdict == Verdict.SAME


def test_growth_on_a_row_whose_outputs_vary_is_reported_not_failed(base):
    """Marlin's documented race at large M: the most frequent of N outputs can change
    between processes, so its accuracy growth is a note; a path that promises identical
    outputs still fails (NONDETERMINISTIC), and a steady row still fails LESS_ACCURATE."""
    note = "global reduction race (documented)"
    v = _less(base, rel_err=1.2e-3, distinct_outputs=3, accuracy_runs=5, nondeterminism_note=note)
    assert v.verdict == Verdict.SAME and not v.fails, v.reasons
    assert any("informational" in r and "grew" in r for r in v.reasons)
    v = _less(base, rel_err=1.2e-3, distinct_outputs=3, accuracy_runs=5)
    assert v.verdict == Verdict.LESS_ACCURATE and v.fails
    assert any("promises identical outputs" in r for r in v.reasons)
    assert _less(base, rel_err=1.2e-3, distinct_outputs=1, accuracy_runs=5,
                 nondeterminism_note=note).verdict == Verdict.LESS_ACCURATE


def test_the_perplexity_models_forward_time_is_information_by_default():
    """ppl rows time an eagerly launched model forward (mode ``model``): host-paced, it moved
    1-6% between two H200s on the same code; it informs, graph rows gate speed."""
    from harness.reports.gate import HOST_PACED_MODES

    assert HOST_PACED_MODES == ("cold", "cpu", "model")
    base = [replace(r, mode="model", kind="ppl") for r in make_rows(ms=(1,), paths=("native_int4",),
                                                                    peers=())]
    cur = resample(base, 5, factor={"native_int4": 1.06})
    res = evaluate(cur, base, S)
    assert {v.verdict for v in res.verdicts} == {Verdict.SLOWER} and res.exit_code == 0
    assert all("informational" in v.reason for v in res.verdicts)
    assert evaluate(cur, base, load_settings("strict")).exit_code == 1
