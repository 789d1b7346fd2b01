"""Issue 7, the planted-defect suite on a CPU: every CPU-detectable defect is caught.

Each test plants one defect of ``planted.defects`` (a misbehaving path object the test
puts in a registry: the marlin_asym CPU emulation carries the Python-side defects), runs
the real runner, and asserts that the gate fails the affected rows with a recognisable
reason while the other rows pass. The GPU-only defects (scratch not regrown, fp16
accumulation, last N tile skipped, side stream) are in tests/gpu/test_planted_defects_gpu.py.
The product holds none of it: no switch, no test double
(``test_the_product_holds_no_test_doubles``).
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from planted import defects, paths, sleep_sizing

from harness.cases.case import GemmCase
from harness.config import SETTING_TYPES, load_settings
from harness.kernels import dispatch
from harness.kernels.base import PATHS, GemmPath, PathRegistry
from harness.kernels.registry_load import load_all
from harness.measure.runner import RunContext, Runner
from harness.reports.gate import Verdict, evaluate
from harness.reports.synthetic import make_rows, resample

FAST = {"warmup_ms": 1, "max_case_seconds": 0.03, "min_samples": 3, "max_samples": 20,
        "target_rel_spread": 0.05}
GATE = load_settings(overrides={"min_effect": 100.0})     # accuracy defects: no speed calls
GROUPED = GemmCase(M=16, N=256, K=512, group_size=128, seed=21)
PER_ROW = GemmCase(M=16, N=256, K=512, group_size=512, seed=21)
REQUIRED = {"packer_off_by_one_tile", "delta_wrong_sign", "per_row_untranslated",
            "correction_twice", "scratch_not_regrown", "fp16_accumulation", "last_n_tile_skipped",
            "cached_output", "racy_output", "slowdown_5pct", "side_stream"}


def _registry(*names: str) -> PathRegistry:
    reg = PathRegistry()
    for n in names:
        reg.register(load_all().get(n))
    return reg


def _run(reg: PathRegistry, cases=(GROUPED, PER_ROW), settings=None, dispatch_settings=None):
    ctx = RunContext(matrix="defects", device=torch.device("cpu"),
                     settings=settings or load_settings(overrides=FAST),
                     modes=("cpu",), registry=reg, arch="cpu", device_name="cpu", commit="t",
                     dispatch_settings=dispatch_settings)
    return Runner(ctx).run(list(cases))


@pytest.fixture(scope="module")
def clean():
    rows = _run(_registry("marlin_asym", "native_int4"))
    assert all(r.status == "ok" for r in rows) and evaluate(rows, [], GATE).passed
    return rows


def _verdicts(result):
    return {(v.case_id, v.path): v for v in result.verdicts}


# --------------------------------------------------------------------------- the registry
def test_registry_lists_every_required_defect():
    assert REQUIRED <= set(defects.DEFECTS) and len(defects.DEFECTS) >= 10
    for d in defects.DEFECTS.values():
        assert d.description and d.caught_by and set(d.on) <= {"cpu", "gpu"} and "gpu" in d.on
        assert d.verdict in {v.value for v in Verdict} and d.verdict != "SAME"
    assert set(defects.names("cpu")) == {"packer_off_by_one_tile", "delta_wrong_sign",
                                         "per_row_untranslated", "correction_twice",
                                         "cached_output", "racy_output", "slowdown_5pct"}
    assert set(defects.names("gpu")) == set(defects.DEFECTS)
    with pytest.raises(ValueError, match="unknown"):
        defects.get("nope")


@pytest.mark.parametrize("name", [n for n in defects.DEFECTS if n != "scratch_not_regrown"])
def test_planting_is_undone_on_exit(name):
    load_all()
    saved = [PATHS.get(n) for n in PATHS.names()]
    with pytest.raises(KeyError):
        with defects.get(name).plant() as planted:
            assert planted is PATHS.get(defects.get(name).default_path)      # a path object
            assert planted not in saved and planted.name == defects.get(name).default_path
            raise KeyError("boom")                 # undone on error too
    assert saved == [PATHS.get(n) for n in PATHS.names()]


def test_the_product_holds_no_test_doubles():
    """No module of the product imports the test suite, keeps a defect switch or a test
    double: every defect is a path object the tests build (``planted``)."""
    root = Path(__file__).resolve().parents[2] / "harness"
    assert not (root / "defects.py").exists() and not (root / "defect_paths.py").exists()
    forbidden = re.compile(r"^\s*(from|import)\s+(planted|tests)\b|TEST_DEFECT|TEST_VARIANT|"
                           r"planted_defect\(|CachedOutputPath|SlowdownPath", re.M)
    hits = [f"{p.relative_to(root.parent)}: {m.group(0).strip()}"
            for p in sorted(root.rglob("*.py")) for m in forbidden.finditer(p.read_text())]
    assert not hits, hits


# --------------------------------------------------------------------------- accuracy defects
@pytest.mark.parametrize("name", ["packer_off_by_one_tile", "delta_wrong_sign", "correction_twice"])
def test_accuracy_defects_fail_the_gate(name, clean):
    with defects.get(name).plant():
        rows = _run(_registry("marlin_asym", "native_int4"))
    for baseline in (clean, []):                       # against the baseline, and on a first run
        result = evaluate(rows, baseline, GATE)
        v = _verdicts(result)
        for case in (GROUPED, PER_ROW):
            hit = v[(case.id, "marlin_asym")]
            assert hit.verdict == Verdict.WORSE_ACCURACY and hit.fails, hit.reasons
            assert "over the gate" in hit.reason and "rel_err" in hit.reason
            assert not v[(case.id, "native_int4")].fails      # the control path is untouched
        assert result.exit_code == 1
    again = _run(_registry("marlin_asym", "native_int4"))   # unplanted: correct again
    assert evaluate(again, clean, GATE).passed


def _fp16_accumulation_outputs(case: GemmCase):
    """(fp32-correction C, fp16-accumulation C, fp64 reference) on the CPU.

    The planted fp16_accumulation defect is CUDA flag bit 0 (GPU only). Its numerics,
    emulated as in docs/reliability.md §3: Marlin's symmetric C rounded to fp16, then the
    correction added either in fp32 and rounded once (correct), or group by group with
    one fp16 rounding per group (the defect).
    """
    from harness.cases.data import case_data
    from harness.kernels.marlin.pack import marlin_pack_asymmetric
    from harness.kernels.reference import a_group_sum, reference_fp64

    d = case_data(case)
    w, A, K, N, G = d.weight, d.A, case.K, case.N, case.group_size
    w_sym = ((w.q.double() - 8).reshape(K // G, G, N) * w.scale.double()[:, None]).reshape(K, N)
    c_marlin, sums = (A.double() @ w_sym).half(), a_group_sum(A, G).float()
    delta = marlin_pack_asymmetric(w).delta.float()
    good = (c_marlin.float() + sums @ delta).half()
    bad = c_marlin.double()
    for g in range(K // G):
        step = sums[:, g:g + 1].half().double() * delta[g:g + 1].half().double()
        bad = (bad + step).half().double()
    return good, bad.half(), reference_fp64(A, w)


def test_fp16_accumulation_signature_is_less_accurate_against_the_baseline():
    """The GPU-only fp16_accumulation defect stays inside Marlin's rel_err bound, so no
    absolute check sees it; against the baseline row of the same case its rel_err and
    rms-ULP p99 grow several-fold: LESS_ACCURATE (docs/reliability.md)."""

    from harness.measure.accuracy import accuracy_stats
    from harness.measure.runner import _accuracy_fields
    from harness.results.schema import ResultRow

    assert defects.get("fp16_accumulation").verdict == Verdict.LESS_ACCURATE.value
    bound, _ = load_all().get("marlin_asym").error_bound(GROUPED)          # asked of the path
    for case in (GemmCase(M=16, N=256, K=512, group_size=128, seed=21),        # GROUPED: 4 groups
                 GemmCase(M=16, N=1024, K=8192, group_size=128, seed=31)):     # the GPU test's, 64
        good, bad, ref = _fp16_accumulation_outputs(case)
        row = ResultRow(matrix="defects", case_id=case.id, path="marlin_asym", mode="cpu", M=case.M,
                        N=case.N, K=case.K, group_size=case.group_size, seed=case.seed,
                        rel_err_bound=bound)
        base = replace(row, **_accuracy_fields(accuracy_stats(good, ref)))
        cur = replace(row, **_accuracy_fields(accuracy_stats(bad, ref)))
        assert cur.rel_err <= bound and cur.nonfinite == 0            # inside the absolute bound
        assert evaluate([cur], [], GATE).verdicts[0].verdict == Verdict.NEW   # no baseline: unseen
        v = evaluate([cur], [base], GATE).verdicts[0]
        assert v.verdict == Verdict.LESS_ACCURATE and v.fails and v.reasons[0].startswith("rel_err")
        assert any(r.startswith("rms_ulp_p99") for r in v.reasons), v.reasons   # both rules fire
        assert cur.rms_ulp_p99 > 1.5 * base.rms_ulp_p99 and v.delta_rms_ulp_p99 > 1.0
        again = replace(row, **_accuracy_fields(accuracy_stats(good, ref)))
        assert evaluate([again], [base], GATE).verdicts[0].verdict == Verdict.SAME


def test_packer_defect_lives_in_the_packed_codes():
    from harness.cases.data import case_data
    from harness.kernels.marlin.pack import marlin_pack_asymmetric, unpack_codes

    w = case_data(GROUPED).weight
    with defects.get("packer_off_by_one_tile").plant() as planted:
        bad = planted.pack_weight(w, "q_minus_8")         # the planted path's own packer
    codes = unpack_codes(bad.B, w.K, w.N)
    assert torch.equal(codes[:, 16:], w.q[:, :-16]) and not torch.equal(codes, w.q)
    assert torch.equal(unpack_codes(marlin_pack_asymmetric(w).B, w.K, w.N), w.q)


# --------------------------------------------------------------------------- -1 translation
def test_per_row_without_the_minus_one_translation_is_lost_dispatch(monkeypatch):
    """On a simulated SM 8.9 GPU with Marlin dispatch on, the dispatcher model predicts
    Marlin's rc 2 for groupsize K: the rows show the fallback and the gate LOST_DISPATCH."""
    monkeypatch.setattr(dispatch, "_capability", lambda device: (8, 9))
    monkeypatch.setenv(dispatch.MARLIN_ENV, "1")
    reg = _registry("marlin_asym")
    base = _run(reg)
    assert {r.dispatch_path for r in base} == {"marlin_asym"}
    d = defects.get("per_row_untranslated")
    with d.plant(registry=reg) as planted:
        assert type(planted).__name__ == "UntranslatedPerRowPath"
        rows = _run(reg, dispatch_settings=d.dispatch)      # the dispatcher's own switch
    by_case = {r.case_id: r for r in rows}
    assert by_case[PER_ROW.id].dispatch_path == "native_int4"
    assert "Marlin returned rc=2" in by_case[PER_ROW.id].fallback_reason
    assert by_case[GROUPED.id].dispatch_path == "marlin_asym"      # grouped weights unaffected
    assert all(r.dispatch_marlin for r in base) and by_case[PER_ROW.id].dispatch_marlin is False
    result = evaluate(rows, base, GATE)
    v = _verdicts(result)
    lost = v[(PER_ROW.id, "marlin_asym")]
    assert lost.verdict == Verdict.LOST_DISPATCH and lost.fails
    assert "dispatcher chose marlin_asym in the baseline, now native_int4" in lost.reason
    assert "rc=2" in lost.reason
    assert not v[(GROUPED.id, "marlin_asym")].fails and result.exit_code == 1


# --------------------------------------------------------------------------- cached output
def test_a_cached_output_is_caught_by_the_fresh_input_recheck(clean):
    reg = _registry("marlin_asym", "native_int4")
    with defects.get("cached_output").plant(registry=reg):
        assert type(reg.get("marlin_asym")).__name__ == "CachedOutputPath"
        rows = _run(reg)
    assert type(reg.get("marlin_asym")).__name__ == "MarlinAsymPath"
    v = _verdicts(evaluate(rows, clean, GATE))
    for case in (GROUPED, PER_ROW):
        hit = v[(case.id, "marlin_asym")]
        assert hit.verdict == Verdict.ERROR and hit.fails
        assert "re-check on fresh inputs after timing" in hit.reason
        assert "does the path cache its output?" in hit.reason
        assert hit.current.rel_err < 1e-3                   # the first inputs looked perfect
        assert not v[(case.id, "native_int4")].fails


# --------------------------------------------------------------------------- run-to-run variation
def test_an_output_that_varies_between_runs_is_nondeterministic(clean):
    """native_int4 promises identical outputs; planted, it differs at one element on every
    other call: accurate on average (rel_err passes), caught by comparing the bits of the
    accuracy runs. marlin_asym, documented to vary, would only be reported."""
    reg = _registry("marlin_asym", "native_int4")
    with defects.get("racy_output").plant(path="native_int4", registry=reg):
        rows = _run(reg)
    result = evaluate(rows, clean, GATE)
    v = _verdicts(result)
    for case in (GROUPED, PER_ROW):
        hit = v[(case.id, "native_int4")]
        assert hit.verdict == Verdict.NONDETERMINISTIC and hit.fails, hit.reasons
        assert "2 distinct outputs in 5 runs on identical inputs" in hit.reason
        assert hit.current.rel_err < 1e-3 and hit.current.distinct_outputs == 2
        assert not v[(case.id, "marlin_asym")].fails
    assert result.exit_code == 1
    assert all(r.distinct_outputs == 1 for r in clean)        # unplanted: identical bits


# --------------------------------------------------------------------------- 5% slowdown
def test_a_five_percent_slowdown_is_slower_on_synthetic_data():
    d = defects.get("slowdown_5pct")
    base = make_rows(shapes=((2048, 2048, 128), (6144, 2048, 2048)), ms=(1, 16, 64), seed=11)
    cur = resample(base, seed=12, factor={d.default_path: 1.0 + defects.SLOWDOWN})
    result = evaluate(cur, base, load_settings("default"))
    for v in result.verdicts:
        if v.path == d.default_path:
            assert v.verdict == Verdict.SLOWER and v.fails, v.reasons
            assert 0.04 < v.time_change < 0.06
        else:
            assert v.verdict in (Verdict.SAME, Verdict.AMBIGUOUS) and not v.fails
    assert result.exit_code == 1


class Steady(GemmPath):
    """native_int4's CPU computation padded to a fixed 300 us per call (a busy wait): a
    stand-in for a GPU kernel of stable duration, so CPU timing noise cannot hide 5%."""

    name, description = "steady", "CPU GEMM padded to 300 us"
    SECONDS = 300e-6

    def __init__(self):
        self.native = load_all().get("native_int4")
        self.weight_formula = self.native.weight_formula

    def weight_bytes(self, K, N, groups):
        return self.native.weight_bytes(K, N, groups)

    def unavailable_reason(self, device):
        return None

    def prepare(self, weight, device):
        return self.native.prepare(weight, device)

    def run(self, prepared, A, out):
        t0 = time.perf_counter()
        self.native.run(prepared, A, out)
        while time.perf_counter() < t0 + self.SECONDS:
            pass
        return out


#: attempts of the CPU-timed plant test: the other xdist worker's load on a 2-core CI
#: machine comes and goes between the runs compared; a wrong verdict must repeat to fail
CPU_TIMED_ATTEMPTS = 3
#: the size a try must read the planted 5% at to count (wider than 5% +- noise; a load
#: burst on one run reads far outside it)
CPU_TIMED_SIZE = (0.03, 0.20)


def test_a_five_percent_slowdown_is_slower_on_cpu_timed_data():
    # up to 0.8 s of 300 us calls per run (~2600 samples). On a 2-core machine busy with
    # another test process one comparison read the planted 5% at p = 0.018 (0.2 s), 0.023
    # (0.4 s) and 0.13 (0.8 s; CI runs of 2026-12-05, medians +5.4..+5.5%): AMBIGUOUS. So
    # the whole comparison (clean, planted, re-measured, and its A/A control) gets up to
    # CPU_TIMED_ATTEMPTS tries; every try's A/A control must hold, one try must call SLOWER
    # and read the planted 5% at its size. A burst of the other worker's load during the
    # planted re-measurement alone once read +64.5% for a first +5.7% (CI of 2026-12-07):
    # a try whose size is that far off was disturbed and gets the next try.
    over = {"warmup_ms": 2, "max_case_seconds": 0.8, "min_samples": 10, "max_samples": 100000,
            "target_rel_spread": 0.002}
    if "gate_eager_speed" in SETTING_TYPES:
        over["gate_eager_speed"] = 1        # cpu-mode speed is informational by default
    settings = load_settings(overrides=over)
    reg = PathRegistry()
    reg.register(Steady())
    case = [GemmCase(M=4, N=256, K=256, group_size=128, seed=3)]
    plant = defects.get("slowdown_5pct").plant

    def clean_run():
        return _run(reg, case, settings)

    def slow_run():
        with plant(path="steady", registry=reg):
            return _run(reg, case, settings)

    tries = []
    for _ in range(CPU_TIMED_ATTEMPTS):
        base, cur, again = clean_run(), slow_run(), clean_run()
        aa = evaluate(again, base, settings,
                      remeasure=lambda keys: (clean_run(), clean_run())).verdicts[0]
        assert aa.verdict != Verdict.SLOWER, aa.reasons   # the A/A control is never slower
        result = evaluate(cur, base, settings, remeasure=lambda keys: (clean_run(), slow_run()))
        v = result.verdicts[0]
        tries.append((v.verdict.name, v.first_change, v.time_change, v.reasons))
        lo, hi = CPU_TIMED_SIZE
        if v.verdict == Verdict.SLOWER and lo < v.time_change < hi:
            break
    assert v.verdict == Verdict.SLOWER and v.fails and result.exit_code == 1, tries
    assert lo < v.time_change < hi, tries


def test_the_spin_period_leaves_the_node_a_bounded_share_of_the_planted_time():
    """3% of a 10-µs call is 0.3 µs, under a spin node's own ~1.2 µs: the spin goes after
    every period-th call, the node at most NODE_SHARE of the period's planted time; calls
    long enough keep one spin per call; nonsense readings fall back to one per call."""
    assert sleep_sizing.spin_period(0.03, 10.0, 1.2) == 6            # 1.2 / (0.75 * 0.3)
    for fraction, inner, node in ((0.03, 10.0, 1.2), (0.03, 41.0, 1.5), (0.05, 7.0, 2.0)):
        p = sleep_sizing.spin_period(fraction, inner, node)
        assert node <= sleep_sizing.NODE_SHARE * fraction * inner * p
        assert p == 1 or node > sleep_sizing.NODE_SHARE * fraction * inner * (p - 1)
    assert sleep_sizing.spin_period(0.03, 200.0, 1.2) == 1
    assert sleep_sizing.spin_period(0.03, 10.0, -0.4) == 1           # the node hid behind
    assert sleep_sizing.spin_period(0.03, float("nan"), 1.2) == 1


def test_plans_are_shared_through_the_plan_file_and_the_closed_loop_corrects_the_cycles(
        tmp_path):
    """A shape planned by one process is read back by the next (same fraction only); the
    closed loop moves the cycles by the share missing, and adds a call to the period where
    the node alone delivers more than asked."""
    plan_file = tmp_path / "log" / "plans.json"
    assert paths.read_plan(plan_file, (1, 2048, 2048), 0.03) is None
    paths.write_plan(plan_file, (1, 2048, 2048), 0.03, {"period": 4, "cycles": 650})
    paths.write_plan(plan_file, (16, 2048, 2048), 0.03, {"period": 2, "cycles": 90})
    got = paths.read_plan(plan_file, (1, 2048, 2048), 0.03)
    assert got == {"period": 4, "cycles": 650, "from_plan_file": True}
    assert paths.read_plan(plan_file, (1, 2048, 2048), 0.05) is None
    assert paths.read_plan(None, (1, 2048, 2048), 0.03) is None
    plan_file.write_text("not json")
    assert paths.read_plan(plan_file, (1, 2048, 2048), 0.03) is None
    # 4% delivered for 3% asked, 6.5 µs calls, period 4, 1e-3 µs per cycle: 260 cycles less
    assert sleep_sizing.next_cycles(650, 4, 0.04, 0.03, 6.5, 1e-3) == (390, 4)
    assert sleep_sizing.next_cycles(650, 4, 0.02, 0.03, 6.5, 1e-3) == (910, 4)
    assert sleep_sizing.next_cycles(100, 4, 0.06, 0.03, 6.5, 1e-3) == (1, 5)


@pytest.mark.parametrize("node_beside", [0.3, 0.8, 1.3, 1.8])
def test_the_closed_loop_lands_on_the_asked_share_whatever_the_node_costs_beside_the_call(
        node_beside):
    """A 6.5-µs call, a spin node of 1.29 µs timed alone, 1e-3 µs per cycle (d3's H100);
    beside the call the node costs anything from 0.3 to 1.8 µs, and each reading of the
    share carries +-0.15 points of noise: the loop ends within TOLERANCE of 3% (or keeps
    its closest try), where sizing from the node alone would miss by up to 1 point."""
    rng = random.Random(int(node_beside * 10))
    inner, rate, fraction = 6.5, 1e-3, 0.03

    def share(cycles: int, period: int) -> tuple[float, float]:
        true = (node_beside + cycles * rate) / (inner * period)
        return true + rng.uniform(-0.0015, 0.0015), inner

    period = sleep_sizing.spin_period(fraction, inner, 1.29)
    cycles = max(1, round((fraction * inner * period - 1.29) / rate))
    period, cycles, got, _, tries = sleep_sizing.converge(share, fraction, period, cycles, rate)
    true = (node_beside + cycles * rate) / (inner * period)
    assert abs(true - fraction) <= sleep_sizing.TOLERANCE * fraction + 0.0015
    assert 1 <= len(tries) <= sleep_sizing.TRIES and [period, cycles, got] in tries
