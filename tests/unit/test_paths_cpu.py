"""The path modules on a CPU: registration, the CPU stand-ins under the accuracy gate, the
negative controls, packing helpers, peers' conventions and the build's one-line errors."""

from __future__ import annotations

import pytest
import torch
from planted.paths import CorrectionTwicePath, WrongSignDeltaPath

import harness.cases.matrices  # noqa: F401
from harness.cases.case import GemmCase
from harness.cases.data import case_data, quantize_asymmetric
from harness.cases.registry import MATRICES
from harness.kernels import build
from harness.kernels.base import PATHS, UnsupportedCase
from harness.kernels.marlin.facts import rc_meaning, workspace_entries
from harness.kernels.marlin.providers import PROVIDERS, get_provider
from harness.kernels.native_int4 import (
    NativeInt4Error,
    native_unsupported_reason,
    pack_native_int4,
    unpack_native_int4,
)
from harness.kernels.reference import reference_fp64
from harness.kernels.registry_load import load_all
from harness.kernels.tinygemm import inner_k_tiles, scales_and_zeros, tinygemm_unsupported_reason
from harness.measure.accuracy import accuracy_stats

CPU = torch.device("cpu")
GATE = 1e-3
SMOKE = MATRICES.cases("smoke")
CPU_PATHS = ("native_int4", "fp16_cache", "marlin_asym")


def _poison(M, N, dtype=torch.float16):
    return torch.full((M, N), float("nan"), dtype=dtype)


def test_load_all_registers_the_five_paths_with_roles():
    reg = load_all()
    assert reg is PATHS
    roles = {n: PATHS.get(n).role for n in PATHS.names()}
    assert {k: roles[k] for k in ("native_int4", "fp16_cache", "marlin_asym", "tinygemm",
                                  "marlin_fused_zero")} == {
        "native_int4": "path", "fp16_cache": "path", "marlin_asym": "path",
        "tinygemm": "peer", "marlin_fused_zero": "peer"}
    load_all()                                     # idempotent: no double registration


@pytest.mark.parametrize("path_name", CPU_PATHS)
@pytest.mark.parametrize("case", SMOKE, ids=lambda c: c.id)
def test_cpu_paths_pass_the_gate(case, path_name):
    path = load_all().get(path_name)
    assert path.unavailable_reason(CPU) is None
    data = case_data(case)
    prepared = path.prepare(data.weight, CPU)
    out = _poison(case.M, case.N)
    ret = path.run(prepared, data.A, out)
    assert ret is out
    acc = accuracy_stats(out, reference_fp64(data.A, data.weight))
    assert acc.nonfinite == 0 and acc.passes(GATE), acc


def test_cpu_implementations_say_what_runs():
    load_all()
    assert "CPU stand-in" in PATHS.get("native_int4").implementation(CPU)
    assert "fp32" in PATHS.get("native_int4").implementation(CPU)
    assert "CPU" in PATHS.get("fp16_cache").implementation(CPU)
    assert "emulation" in PATHS.get("marlin_asym").implementation(CPU)


@pytest.mark.parametrize("name", ["tinygemm", "marlin_fused_zero"])
def test_peers_unavailable_on_cpu_with_a_reason(name):
    reason = load_all().get(name).unavailable_reason(CPU)
    assert reason and "CUDA" in reason and "\n" not in reason


def test_fp16_cache_reports_the_cache_bytes():
    case = SMOKE[1]
    w = case_data(case).weight
    prepared = load_all().get("fp16_cache").prepare(w, CPU)
    assert prepared.extra_bytes == case.K * case.N * 2
    assert prepared.state["W"].dtype == torch.float16


def test_native_pack_layout_and_roundtrip():
    q = torch.arange(16 * 3, dtype=torch.uint8).reshape(16, 3) % 16
    packed = pack_native_int4(q)
    assert packed.shape == (2, 3) and packed.dtype == torch.int32
    word = int(packed[1, 2]) & 0xFFFFFFFF
    assert [(word >> (4 * i)) & 0xF for i in range(8)] == [int(q[8 + i, 2]) for i in range(8)]
    full = torch.full((8, 1), 15, dtype=torch.uint8)
    assert int(pack_native_int4(full)[0, 0]) == -1                 # 0xFFFFFFFF
    qr = case_data(SMOKE[0]).weight.q
    assert torch.equal(unpack_native_int4(pack_native_int4(qr)), qr)


def test_native_rejects_what_its_layout_cannot_hold():
    with pytest.raises(NativeInt4Error, match="K=12"):
        pack_native_int4(torch.zeros(12, 4, dtype=torch.uint8))
    with pytest.raises(NativeInt4Error, match="q:"):
        pack_native_int4(torch.zeros(8, 4, dtype=torch.int32))
    w = quantize_asymmetric(torch.randn(24, 8), 12)
    assert "group_size=12" in native_unsupported_reason(w)


# ---------------------------------------------------------------- marlin_asym emulation
@pytest.fixture(scope="module")
def asym_case():
    case = GemmCase(M=16, N=256, K=512, group_size=128, seed=5)
    data = case_data(case)
    return case, data, reference_fp64(data.A, data.weight)


def _run_asym(data, path=None, marlin_only=False):
    path = path or load_all().get("marlin_asym")
    prepared = path.prepare(data.weight, CPU)
    out = _poison(*(data.A.shape[0], data.weight.N))
    if marlin_only:
        path.run_marlin_only(prepared, data.A, out)
    else:
        path.run(prepared, data.A, out)
    return out


def test_marlin_asym_negative_controls_fail_the_gate(asym_case):
    case, data, ref = asym_case
    assert accuracy_stats(_run_asym(data), ref).passes(GATE)
    for kw in (dict(marlin_only=True), dict(path=WrongSignDeltaPath()),
               dict(path=CorrectionTwicePath())):
        acc = accuracy_stats(_run_asym(data, **kw), ref)
        assert acc.nonfinite == 0 and not acc.passes(GATE), kw
    assert accuracy_stats(_run_asym(data), ref).passes(GATE)     # the registered path: untouched


def test_marlin_asym_per_row_uses_the_providers_formula():
    case = GemmCase(M=16, N=256, K=512, group_size=512, seed=5)
    data = case_data(case)
    prepared = load_all().get("marlin_asym").prepare(data.weight, CPU)
    pack = prepared.state["pack"]
    assert prepared.state["groupsize"] == -1 and pack.formula == "q_times_s"
    assert torch.equal(pack.delta, data.weight.zero.float())          # delta = zero, no + 8 s
    out = _poison(16, 256)
    load_all().get("marlin_asym").run(prepared, data.A, out)
    assert accuracy_stats(out, reference_fp64(data.A, data.weight)).passes(GATE)


def test_providers_declare_formulas():
    q, up = PROVIDERS["quanto"], PROVIDERS["upstream"]
    assert (q.formula(128), q.formula(-1)) == ("q_minus_8", "q_times_s")
    assert (up.formula(128), up.formula(-1)) == ("q_minus_8", "q_minus_8")
    assert get_provider().name == "quanto"
    with pytest.raises(ValueError, match="provider"):
        get_provider("nope")
    assert "CUDA" in q.unavailable_reason(CPU) and "CUDA" in up.unavailable_reason(CPU)
    assert workspace_entries(2048) == 256 and rc_meaning(2).startswith("no Marlin kernel")


# ---------------------------------------------------------------- tinygemm conventions
def test_tinygemm_rejects_per_row_and_maps_zero():
    w = quantize_asymmetric(torch.randn(512, 64), 512)
    assert "per-row" in tinygemm_unsupported_reason(w)
    with pytest.raises(UnsupportedCase, match="group sizes"):
        load_all().get("tinygemm").prepare(w, CPU)
    assert (inner_k_tiles(256), inner_k_tiles(192), inner_k_tiles(96)) == (8, 4, 2)
    g = quantize_asymmetric(torch.randn(256, 64), 64)
    sz = scales_and_zeros(g)
    assert sz.shape == (4, 64, 2) and sz.dtype == torch.bfloat16
    expected_z = (g.zero.double() + 8 * g.scale.double()).to(torch.bfloat16)
    assert torch.equal(sz[..., 1], expected_z)


def test_tinygemm_zero_convention_with_torchs_cpu_kernel():
    # torch's CPU int4 kernel shares tinygemm's (q - 8) * s + z convention: the mapped
    # zero reproduces W, the unmapped one does not
    case = GemmCase(M=4, N=64, K=256, group_size=64, seed=6)
    data = case_data(case)
    w = data.weight
    try:
        B = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            w.q.t().contiguous().to(torch.int32), 8)
        run = torch.ops.aten._weight_int4pack_mm_for_cpu
    except (AttributeError, RuntimeError) as exc:
        pytest.skip(f"torch {torch.__version__} has no CPU int4pack op: {exc}")
    A = data.A.to(torch.bfloat16)
    ref = reference_fp64(data.A, w)
    good = run(A, B, 64, scales_and_zeros(w))
    bad_sz = torch.stack([w.scale.double(), w.zero.double()], -1).to(torch.bfloat16)
    bad = run(A, B, 64, bad_sz)
    assert accuracy_stats(good, ref, dtype="bfloat16").passes(1e-2)
    assert not accuracy_stats(bad, ref, dtype="bfloat16").passes(1e-2)


# ---------------------------------------------------------------- build errors
def test_build_errors_are_one_line_on_this_machine():
    if torch.version.cuda is not None and torch.cuda.is_available():
        pytest.skip("a CUDA machine: the build may succeed here")
    reason = build.extension_unavailable_reason()
    assert reason and "\n" not in reason
    assert ("CPU build" in reason) or ("no CUDA GPU" in reason)
    with pytest.raises(build.BuildError):
        build.extension()
    assert load_all().get("native_int4").unavailable_reason(torch.device("cuda")) == reason


def test_sources_and_quanto_lookup():
    names = {p.name for p in build.own_sources()}
    assert {"native_int4.cu", "correction.cu", "bindings.cpp", "harness_kernels.h",
            "correction_variants.cu", "correction_variants.cuh", "correction_variant_graph.cu",
            "correction_variant_side_stream.cu", "correction_variant_fused.cu",
            "correction_variant_floor.cu"} <= names
    folder, why = build.quanto_marlin_dir()
    assert (folder is None) != (why is None)
    if folder is not None:
        assert (folder / "marlin_cuda_kernel.cu").is_file()
    else:
        assert "optimum" in why


def test_digest_changes_with_any_input(tmp_path):
    from harness.kernels.build_plan import digest

    a = tmp_path / "a.cu"
    a.write_text("x")
    d1 = digest([a], ["sm_90"])
    assert d1 == digest([a], ["sm_90"])
    assert d1 != digest([a], ["sm_89"])
    a.write_text("y")
    assert d1 != digest([a], ["sm_90"])


def test_build_root_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_BUILD_DIR", str(tmp_path))
    assert build.build_root() == tmp_path
    monkeypatch.delenv("HARNESS_BUILD_DIR")
    assert build.build_root().parts[-2:] == (".cache", "int4-harness")
