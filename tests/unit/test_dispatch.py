"""The dispatcher model on a CPU: every precondition on both sides, the -1 translation,
Marlin's status model, the rc fallback (through a fake Marlin) and the first-dispatch log."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import harness.cases.matrices  # noqa: F401
from harness.cases.data import quantize_asymmetric
from harness.cases.registry import MATRICES
from harness.kernels import dispatch as dp
from harness.kernels import quant_gemm
from harness.kernels.dispatch import (
    DispatchSettings,
    WeightTraits,
    decide,
    decide_for_case,
    expected_marlin_rc,
    marlin_groupsize_for,
)
from harness.kernels.marlin.asym import MarlinAsymPath
from harness.kernels.marlin.facts import marlin_weight_reason
from harness.kernels.marlin.fused_zero import MarlinFusedZeroPath
from harness.kernels.quant_gemm import QuantGemm
from harness.model.quant_linear import PathUnavailable, QuantLinear, QuantRuntime

ADA = (8, 9)
ON = DispatchSettings(marlin_enabled=True)
EDGES = MATRICES.cases("edges")

#: tag -> (path decide() picks on SM 8.9 with dispatch on, substring of the reason or "")
EXPECTED = {
    "bt_below_16": ("native_int4", "BT=15 < 16"),
    "bt_16": ("marlin_asym", ""),
    "k_not_mult_128": ("native_int4", "K=2112 % 128"),
    "k_mult_128": ("marlin_asym", ""),
    "n_not_mult_128": ("native_int4", "N=2112 % 128"),
    "n_mult_128_not_256": ("marlin_asym", ""),
    "n_not_mult_256_m_gt_16": ("marlin_asym", ""),
    "n_mult_256_m_gt_16": ("marlin_asym", ""),
    "per_row_minus_1": ("marlin_asym", ""),
    "group_64_no_kernel": ("marlin_asym", ""),
    "head_projection": ("native_int4", "no Marlin pack"),
    "m_above_64": ("marlin_asym", ""),
    "m_above_64_padded": ("marlin_asym", ""),
    "m_1024": ("marlin_asym", ""),
}
#: tag -> Marlin's status for the groupsize TinyLoop passes (only where Marlin is called)
EXPECTED_RC = {"n_not_mult_256_m_gt_16": 1, "group_64_no_kernel": 2}


def _traits(case, **kw):
    base = WeightTraits(case.K, case.N, case.group_size,
                        has_marlin_pack=dp.packable(case.K, case.N))
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize("case", EDGES, ids=lambda c: f"{c.tags[0]}-{c.id}")
def test_edges_matrix_decisions(case):
    tag = case.tags[0]
    path, reason = EXPECTED[tag]
    d = decide(_traits(case), case.M, ADA, ON)
    assert d.path == path
    assert reason in d.fallback_reason
    assert (d.fallback_reason == "") == (path == "marlin_asym")
    if path == "marlin_asym":
        assert d.marlin_groupsize == (-1 if case.per_row else case.group_size)
        rc = expected_marlin_rc(case.M, case.N, case.K, d.marlin_groupsize)
        assert rc == EXPECTED_RC.get(tag, 0)


@pytest.mark.parametrize("case", EDGES, ids=lambda c: f"{c.tags[0]}-{c.id}")
def test_decide_for_case_folds_in_the_predicted_rc(case, monkeypatch):
    monkeypatch.setattr(dp, "_capability", lambda device: ADA)
    d = decide_for_case(case, torch.device("cuda"), ON)
    tag = case.tags[0]
    rc = EXPECTED_RC.get(tag, 0)
    if rc:
        assert d.path == "native_int4" and f"rc={rc}" in d.fallback_reason
    else:
        assert d.path == EXPECTED[tag][0]


def test_each_precondition_on_both_sides():
    case = next(c for c in EDGES if "bt_16" in c.tags)          # M16 N2048 K2048 g128
    ok = _traits(case)
    assert decide(ok, 16, ADA, ON).path == "marlin_asym"
    flips = {
        "bits=8 != 4": dict(traits=dataclasses.replace(ok, bits=8)),
        "exact_int4": dict(traits=dataclasses.replace(ok, exact_int4=True)),
        "dispatch disabled": dict(settings=DispatchSettings(marlin_enabled=False)),
        "no Marlin pack": dict(traits=dataclasses.replace(ok, has_marlin_pack=False)),
        "unavailable on SM 7.5": dict(cap=(7, 5)),
        "unavailable on SM 9.0": dict(cap=(9, 0)),
        "no CUDA GPU": dict(cap=None),
        "BT=15 < 16": dict(M=15),
        "K=2112 % 128": dict(traits=dataclasses.replace(ok, K=2112)),
        "N=2112 % 128": dict(traits=dataclasses.replace(ok, N=2112)),
    }
    for reason, kw in flips.items():
        d = decide(kw.get("traits", ok), kw.get("M", 16), kw.get("cap", ADA),
                   kw.get("settings", ON))
        assert d.path == "native_int4", reason
        assert reason in d.fallback_reason, (reason, d.fallback_reason)
        assert len(d.failed) == 1, d.failed
    for cap in dp.TINYLOOP_MARLIN_ARCHS:
        assert decide(ok, 16, cap, ON).path == "marlin_asym"
    assert decide(dataclasses.replace(ok, K=2048 + 128), 16, ADA, ON).path == "marlin_asym"


def test_several_failures_are_all_recorded():
    case = next(c for c in EDGES if "bt_16" in c.tags)
    d = decide(dataclasses.replace(_traits(case), N=2112), 3, (7, 5),
               DispatchSettings(marlin_enabled=False))
    assert len(d.failed) == 4 and d.fallback_reason.count(";") == 3


def test_fp16_cache_wins_over_everything():
    case = next(c for c in EDGES if "bt_16" in c.tags)
    d = decide(_traits(case, has_fp16_cache=True), 1, None, DispatchSettings(marlin_enabled=False))
    assert d.path == "fp16_cache" and d.fallback_reason == ""


def test_sm90_only_by_opt_in_and_recorded():
    case = next(c for c in EDGES if "bt_16" in c.tags)
    no = decide(_traits(case), 16, (9, 0), ON)
    assert no.path == "native_int4" and "HARNESS_MARLIN_SM90" in no.fallback_reason
    yes = decide(_traits(case), 16, (9, 0), dataclasses.replace(ON, allow_sm90=True))
    assert yes.path == "marlin_asym" and "opt-in" in yes.arch_note
    assert decide(_traits(case), 16, ADA, dataclasses.replace(ON, allow_sm90=True)).arch_note == ""


def test_environment_and_api_toggle(monkeypatch):
    case = next(c for c in EDGES if "bt_16" in c.tags)
    t = _traits(case)
    monkeypatch.delenv(dp.MARLIN_ENV, raising=False)
    monkeypatch.delenv(dp.SM90_ENV, raising=False)
    try:
        assert decide(t, 16, ADA).path == "native_int4"            # TinyLoop's default: off
        monkeypatch.setenv(dp.MARLIN_ENV, "1")
        assert decide(t, 16, ADA).path == "marlin_asym"
        dp.set_marlin_dispatch(False)                               # the API toggle wins
        assert decide(t, 16, ADA).path == "native_int4"
        monkeypatch.setenv(dp.MARLIN_ENV, "0")
        dp.set_marlin_dispatch(True)
        assert decide(t, 16, ADA).path == "marlin_asym"
        dp.set_marlin_dispatch(None)
        assert decide(t, 16, ADA).path == "native_int4"
        monkeypatch.setenv(dp.SM90_ENV, "1")
        assert DispatchSettings().archs()[-1] == (9, 0)
    finally:
        dp.set_marlin_dispatch(None)


def test_minus_one_translation():
    assert marlin_groupsize_for(2048, 2048) == -1
    assert marlin_groupsize_for(128, 2048) == 128
    assert marlin_groupsize_for(2048, 2048, translate=False) == 2048
    case = next(c for c in EDGES if "per_row_minus_1" in c.tags and c.M == 16)
    d = decide(_traits(case), 16, ADA, dataclasses.replace(ON, translate_per_row=False))
    assert d.path == "marlin_asym" and d.marlin_groupsize == 2048
    assert expected_marlin_rc(16, case.N, case.K, 2048) == 2          # the seed's silent fallback
    assert expected_marlin_rc(16, case.N, case.K, -1) == 0


@pytest.mark.parametrize("M,N,K,gs,rc", [
    (16, 256, 256, 128, 0), (16, 128, 256, 128, 0), (17, 128, 256, 128, 1), (17, 256, 128, 128, 0),
    (16, 256, 192, 128, 1), (16, 256, 256, 64, 2), (16, 256, 256, 256, 2), (64, 256, 2048, -1, 0),
    (100, 2048, 2048, 128, 0), (1024, 2048, 2048, 128, 0), (2000, 256, 256, 128, 0),
    (0, 256, 256, 128, 0),
])
def test_expected_marlin_rc_model(M, N, K, gs, rc):
    assert expected_marlin_rc(M, N, K, gs) == rc


# ---------------------------------------------------------------- the executor, with fakes
def _weight(K=256, N=256, gs=128):
    w = torch.linspace(-1, 1, K * N, dtype=torch.float32).reshape(K, N).sin()
    return quantize_asymmetric(w, gs)


class FakeMarlin:
    """Returns Marlin's modelled status; on success writes a sentinel so the test sees who wrote."""

    def __init__(self):
        self.calls = []

    def __call__(self, A, out, gs):
        self.calls.append(gs)
        rc = expected_marlin_rc(A.shape[0], out.shape[1], A.shape[1], gs)
        if rc == 0:
            out.fill_(7.0)
        return rc


def _native(A, out):
    out.fill_(3.0)
    return out


def test_quant_gemm_records_the_rc_fallback():
    w = _weight(K=256, N=256, gs=64)                 # no g64 kernel: rc 2
    fake = FakeMarlin()
    qg = QuantGemm(w, torch.device("cpu"), ON, capability=ADA, marlin_call=fake,
                   native_call=_native)
    out = torch.full((16, 256), float("nan"), dtype=torch.float16)
    rec = qg(torch.ones(16, 256, dtype=torch.float16), out)
    assert fake.calls == [64]
    assert (rec.path, rec.marlin_rc, rec.marlin_groupsize) == ("native_int4", 2, 64)
    assert "rc=2" in rec.fallback_reason and bool((out == 3.0).all())


def test_quant_gemm_per_row_translation_and_its_defect():
    w = _weight(K=256, N=256, gs=256)
    for translate, path, rc, value in ((True, "marlin_asym", 0, 7.0),
                                       (False, "native_int4", 2, 3.0)):
        settings = dataclasses.replace(ON, translate_per_row=translate)
        qg = QuantGemm(w, torch.device("cpu"), settings, capability=ADA, marlin_call=FakeMarlin(),
                       native_call=_native)
        out = torch.full((16, 256), float("nan"), dtype=torch.float16)
        rec = qg(torch.ones(16, 256, dtype=torch.float16), out)
        assert (rec.path, rec.marlin_rc) == (path, rc)
        assert rec.marlin_groupsize == (-1 if translate else 256)
        assert bool((out == value).all())


def test_quant_gemm_precondition_fallback_never_calls_marlin():
    fake = FakeMarlin()
    qg = QuantGemm(_weight(), torch.device("cpu"), ON, capability=ADA, marlin_call=fake,
                   native_call=_native)
    rec = qg(torch.ones(8, 256, dtype=torch.float16), torch.empty(8, 256, dtype=torch.float16))
    assert fake.calls == [] and rec.path == "native_int4" and rec.marlin_rc is None
    assert rec.fallback_reason == "BT=8 < 16"


def test_quant_gemm_fp16_cache_and_real_native_on_cpu():
    w = _weight()
    A = torch.linspace(-1, 1, 16 * 256).reshape(16, 256).half()
    ref = A.double() @ w.dequantize()
    qg = QuantGemm(w, torch.device("cpu"), ON, fp16_cache=True, capability=ADA,
                   marlin_call=FakeMarlin())
    out = torch.full((16, 256), float("nan"), dtype=torch.float16)
    assert qg(A, out).path == "fp16_cache"
    assert torch.allclose(out.double(), ref, rtol=1e-2, atol=1e-2)
    qg = QuantGemm(w, torch.device("cpu"), DispatchSettings(marlin_enabled=False))
    out = torch.full((16, 256), float("nan"), dtype=torch.float16)
    rec = qg(A, out)
    assert rec.path == "native_int4" and "disabled" in rec.fallback_reason
    assert torch.allclose(out.double(), ref, rtol=1e-2, atol=1e-2)


def test_first_successful_dispatch_logged_once(capsys):
    quant_gemm.reset_first_dispatch_log()
    qg = QuantGemm(_weight(K=256, N=256, gs=256), torch.device("cpu"), ON, capability=ADA,
                   marlin_call=FakeMarlin(), native_call=_native)
    A = torch.ones(16, 256, dtype=torch.float16)
    for _ in range(3):
        qg(A, torch.empty(16, 256, dtype=torch.float16))
    err = capsys.readouterr().err
    assert err == "[marlin] first dispatch ok: BT=16 N=256 K=256 gs=-1\n"
    quant_gemm.reset_first_dispatch_log()


def test_no_log_when_marlin_fails(capsys):
    quant_gemm.reset_first_dispatch_log()
    qg = QuantGemm(_weight(gs=64), torch.device("cpu"), ON, capability=ADA,
                   marlin_call=FakeMarlin(), native_call=_native)
    qg(torch.ones(16, 256, dtype=torch.float16), torch.empty(16, 256, dtype=torch.float16))
    assert "[marlin]" not in capsys.readouterr().err


def test_decide_for_case_on_cpu_says_no_gpu():
    case = next(c for c in EDGES if "bt_16" in c.tags)
    d = decide_for_case(case, torch.device("cpu"), ON)
    assert d.path == "native_int4" and "no CUDA GPU" in d.fallback_reason


def test_marlin_paths_declare_the_shapes_marlin_rejects_before_the_call():
    """Forced Marlin rows on shapes without a kernel are `unavailable` (with the rc the
    launcher would return), not ERROR; the model is the one the dispatcher uses."""
    from harness.cases import MATRICES
    from harness.kernels.base import PATHS
    from harness.kernels.dispatch import expected_marlin_rc, marlin_groupsize_for
    from harness.kernels.registry_load import load_all

    load_all()
    for name in ("marlin_asym", "marlin_fused_zero"):
        path = PATHS.get(name)
        for case in MATRICES.cases("edges") + MATRICES.cases("parity"):
            why = path.unsupported_reason(case)
            packable = case.N % 64 == 0 and case.K % 16 == 0
            rc = expected_marlin_rc(case.M, case.N, case.K,
                                    marlin_groupsize_for(case.group_size, case.K))
            assert (why is None) == (packable and rc == 0), (name, case.id, why)
            if why and packable:
                assert f"rc={rc}" in why
    marlin = PATHS.get("marlin_asym")
    reasons = {c.id: marlin.unsupported_reason(c) for c in MATRICES.cases("edges")}
    assert "rc=2" in reasons["M16-N2048-K2048-g64-s2"]
    assert "rc=1" in reasons["M32-N2176-K2048-g128-s2"]
    assert reasons["M16-N2176-K2048-g128-s2"] is None       # thread_n 128 at M <= 16 runs
    assert reasons["M16-N2048-K2048-gK-s2"] is None         # per-row, translated to -1
    assert "N % 64" in reasons["M16-N50257-K2048-g128-s2"]


def test_a_weight_no_batch_size_can_run_is_refused_by_both_marlin_paths_at_load():
    """SmolLM2-135M's layers (hidden 576, k/v 192, MLP 1536) met Marlin on the H100 as
    rc=1 at the first call of a forced marlin_asym model, and the CPU emulation ran them
    (2026-12-06): now a model forced through either path is unavailable, in one line, on
    both devices; a weight that some batch size runs is kept (its rc is the call's)."""
    assert marlin_weight_reason(576, 576, 576) and "N=576, K=576" in marlin_weight_reason(
        576, 576, 576)
    assert marlin_weight_reason(192, 576, 576)
    assert marlin_weight_reason(576, 1536, 1536)       # the MLP's down projection: N = 576
    assert "rc=2 above" in marlin_weight_reason(1536, 576, 32)   # no kernel for g32
    assert marlin_weight_reason(1536, 576, 576) is None   # M > 16's 64x256 tiles take it
    assert marlin_weight_reason(8192, 8192, 128) is None
    assert marlin_weight_reason(256, 384, 384) is None
    # the seed's untranslated per-row size still reaches the kernel (its rc 2 is the check)
    assert marlin_weight_reason(8192, 2048, 2048) is None
    g = torch.Generator().manual_seed(0)
    w = quantize_asymmetric(torch.randn(576, 576, generator=g), 64)
    for path in (MarlinAsymPath(), MarlinFusedZeroPath()):
        assert "Marlin has no kernel" in path.unsupported_weight_reason(w)
    # a model forced through the path (on the CPU: marlin_asym's emulation): that layer
    # makes the mode unavailable, naming the layer and Marlin's codes
    runtime = QuantRuntime("marlin_asym", torch.device("cpu"))
    with pytest.raises(PathUnavailable, match="cannot prepare layers.0.q_proj .*"
                                              "marlin_asym: Marlin has no kernel"):
        QuantLinear("layers.0.q_proj", w, runtime, None)
    # the dispatcher model still packs it, as TinyLoop's loader does, and falls back per call
    runtime = QuantRuntime("dispatch", torch.device("cpu"))
    lin = QuantLinear("layers.0.q_proj", w, runtime, None)
    assert lin.state["marlin"] is not None
    ok = quantize_asymmetric(torch.randn(384, 256, generator=g), 384)   # K = 384, per-column
    assert MarlinAsymPath().unsupported_weight_reason(ok) is None
    st = MarlinAsymPath().prepare(ok, torch.device("cpu")).state
    # per-column: Marlin's -1, and the group's 384 rows, from which auto picks its variant
    assert st["groupsize"] == -1 and st["group_rows"] == 384
