"""Parity chain target 5: end-to-end model parity, Marlin dispatch off vs on (marker ``gpu``).

The seed's ``tinyloop.test_marlin_e2e``: score the same 1K-token sequence with the
dispatcher's Marlin branch off and on and check the perplexities agree. Here on the
committed looped-transformer fixture (both variants, g128 and per-row), with the
SwiGLU pair dispatched to Marlin (``dispatch_pair``, every projection on Marlin) and as
TinyLoop runs it today (``dispatch``, gate/up on the fused native kernel).

Tolerance: ``PPL_TOLERANCE`` = 1 % relative (the default preset's ``ppl_drift_tolerance``;
the seed measured 0.67 % on a 2B model with 8 loop iterations). The dispatch counts are
exact: with dispatch off every call is native INT4 and nothing is packed; with the pair
dispatch every weight is packed and every call takes Marlin with zero fallbacks.

On SM 9.0 TinyLoop's dispatcher refuses Marlin; these tests use the harness's explicit
opt-in (``allow_sm90=True``), so Marlin is measured on Hopper and the rows say so.
Skips (with the reason): no CUDA GPU, the harness extension or quanto's Marlin not built,
no fixture.
"""

from __future__ import annotations

import json
import math

import pytest

from harness.model.fixture import VARIANTS, FixtureError, load_fixture
from harness.model.ppl import FixtureSubject, format_result, score_subject
from harness.model.quant_linear import FUSED_REASON

pytestmark = pytest.mark.gpu

PPL_TOLERANCE = 0.01
MODES = ("reference", "dispatch_off", "dispatch", "dispatch_pair")


@pytest.fixture(scope="module", params=list(VARIANTS))
def scored(request, cuda_device, marlin_ext, gpu_out_dir):
    try:
        fx = load_fixture(request.param)
    except FixtureError as exc:
        pytest.skip(f"no usable fixture: {exc}")
    results = score_subject(FixtureSubject(fx), MODES, cuda_device, allow_sm90=True)
    (gpu_out_dir / f"model_parity_{request.param}.txt").write_text(
        "\n".join(format_result(r) for r in results) + "\n")
    return fx, {r.mode: r for r in results}


def _ok(by: dict, mode: str):
    r = by[mode]
    if r.status != "ok":
        pytest.fail(format_result(r))
    return r


def test_every_mode_scored(scored):
    _, by = scored
    for mode in MODES:
        _ok(by, mode)


def _expected(fx) -> tuple[int, int]:
    cfg = fx.config
    return 5 * (cfg.pre + cfg.loops), 5 * (cfg.pre + 1)     # GEMM calls per forward, weights


def test_dispatch_off_is_all_native(scored):
    fx, by = scored
    calls, weights = _expected(fx)
    rep = _ok(by, "dispatch_off").report
    assert dict(rep.calls) == {"native_int4": calls}
    assert rep.packed == 0 and rep.weights == weights


def test_marlin_pair_dispatch_takes_marlin_everywhere(scored):
    fx, by = scored
    calls, weights = _expected(fx)
    rep = _ok(by, "dispatch_pair").report
    assert rep.packed == weights, rep.to_dict()
    assert dict(rep.calls) == {"marlin_asym": calls}, rep.fallbacks_text()
    assert rep.fallbacks == ()
    assert rep.pack_bytes > 0


def test_fused_swiglu_stays_native(scored):
    fx, by = scored
    calls, _ = _expected(fx)
    rep = _ok(by, "dispatch").report
    swiglu_calls = 2 * (fx.config.pre + fx.config.loops)
    assert dict(rep.calls) == {"marlin_asym": calls - swiglu_calls, "native_int4": swiglu_calls}
    assert dict(rep.fallbacks) == {FUSED_REASON: swiglu_calls}


@pytest.mark.parametrize("mode", ["dispatch", "dispatch_pair"])
def test_dispatch_on_agrees_with_off(scored, mode, gpu_out_dir):
    fx, by = scored
    off, on, ref = _ok(by, "dispatch_off").ppl, _ok(by, mode).ppl, _ok(by, "reference").ppl
    drift = on / off - 1.0
    (gpu_out_dir / f"model_parity_{fx.variant}_{mode}.json").write_text(json.dumps(
        {"off": off, "on": on, "reference": ref, "drift": drift}, indent=1))
    assert math.isfinite(on) and math.isfinite(off)
    assert on < 0.5 * fx.config.vocab, "the quantized fixture should be far better than uniform"
    assert abs(drift) < PPL_TOLERANCE, (
        f"{mode}: PPL {on:.5f} vs dispatch off {off:.5f} ({drift:+.3%})")
    assert abs(on / ref - 1.0) < PPL_TOLERANCE, f"{mode}: PPL {on:.5f} vs fp32 reference {ref:.5f}"
