"""Every path on the GPU: accuracy on every parity case, Marlin's status vs the model, the
dispatcher on the edges matrix, the build cache, and the parity table (marker ``gpu``).

The table (``parity_table.md`` / ``.csv`` under ``$HARNESS_GPU_OUT``) has one row per
parity case x path: CUDA-event median time, rel_err and max ULP against fp64, and what
ran (or why not). Timings are leads for the report, not gates.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

import harness.cases.matrices  # noqa: F401
from harness.cases.data import case_data
from harness.cases.registry import MATRICES
from harness.kernels.base import KernelReturnCode, UnsupportedCase
from harness.kernels.dispatch import (
    DispatchSettings,
    decide_for_case,
    expected_marlin_rc,
    marlin_groupsize_for,
)
from harness.kernels.marlin.pack import marlin_pack_asymmetric
from harness.kernels.marlin.providers import PROVIDERS, workspace_entries
from harness.kernels.quant_gemm import QuantGemm, reset_first_dispatch_log
from harness.kernels.reference import reference_fp64
from harness.kernels.registry_load import load_all
from harness.measure.accuracy import accuracy_stats

pytestmark = pytest.mark.gpu

PATHS = load_all()
PARITY = MATRICES.cases("parity")
EDGES = MATRICES.cases("edges")
ON = DispatchSettings(marlin_enabled=True, allow_sm90=True)


def _poison(M, N, device, dtype=torch.float16):
    return torch.full((M, N), float("nan"), dtype=dtype, device=device)


@pytest.fixture(scope="module")
def data_cache(cuda_device):
    cache = {}

    def get(case):
        if case.id not in cache:
            d = case_data(case)
            A = d.A.to(cuda_device)
            cache[case.id] = (A, d.weight.to(cuda_device),
                              reference_fp64(A, d.weight.to(cuda_device)))
        return cache[case.id]

    return get


def _measure(path, case, A, w, ref, device):
    """(status, accuracy or None, detail). Raises nothing a path is expected to raise."""
    try:
        prepared = path.prepare(w, device)
    except UnsupportedCase as exc:
        return "unsupported", None, str(exc)
    out = _poison(case.M, case.N, device, prepared.output_dtype)
    try:
        path.run(prepared, A.to(prepared.input_dtype), out)
    except KernelReturnCode as exc:
        return "rc", None, exc
    torch.cuda.synchronize()
    dtype = "bfloat16" if prepared.output_dtype == torch.bfloat16 else "float16"
    return "ok", accuracy_stats(out, ref, 2.0, dtype), prepared


@pytest.mark.parametrize("path_name", PATHS.names())
@pytest.mark.parametrize("case", PARITY, ids=lambda c: c.id)
def test_path_accuracy_on_parity(case, path_name, data_cache, cuda_device, gates):
    path = PATHS.get(path_name)
    reason = path.unavailable_reason(cuda_device)
    if reason:
        pytest.skip(f"{path_name} unavailable: {reason}")
    A, w, ref = data_cache(case)
    status, acc, detail = _measure(path, case, A, w, ref, cuda_device)
    if status == "unsupported":
        pytest.skip(f"{path_name} does not take this case: {detail}")
    if status == "rc":
        gs = marlin_groupsize_for(case.group_size, case.K)
        assert detail.rc == expected_marlin_rc(case.M, case.N, case.K, gs) != 0
        pytest.skip(f"Marlin rc={detail.rc} ({detail.detail}), as the rc model predicts")
    gates[1](acc, path_name, case)


@pytest.mark.parametrize("case", EDGES, ids=lambda c: f"{c.tags[0]}-{c.id}")
def test_dispatch_on_edges_matches_the_model(case, data_cache, marlin_ext, cuda_device, gates):
    A, w, ref = data_cache(case)
    predicted = decide_for_case(case, cuda_device, ON)
    qg = QuantGemm(w, cuda_device, ON)
    out = _poison(case.M, case.N, cuda_device)
    rec = qg(A, out)
    torch.cuda.synchronize()
    assert rec.path == predicted.path, (rec, predicted)
    if rec.marlin_rc is not None:
        assert rec.marlin_rc == expected_marlin_rc(case.M, case.N, case.K, rec.marlin_groupsize)
    if rec.path == "native_int4":
        assert rec.fallback_reason
    if rec.path == "marlin_asym" and cuda_device.type == "cuda":
        assert "opt-in" in rec.arch_note or torch.cuda.get_device_capability() != (9, 0)
    acc = accuracy_stats(out, ref)
    assert acc.nonfinite == 0 and acc.passes(gates[0](rec.path, case)), (rec, acc)


def test_first_marlin_dispatch_is_logged_once(data_cache, marlin_ext, cuda_device, capfd):
    case = next(c for c in EDGES if "bt_16" in c.tags)
    A, w, _ = data_cache(case)
    reset_first_dispatch_log()
    qg = QuantGemm(w, cuda_device, ON)
    for _ in range(3):
        qg(A, _poison(case.M, case.N, cuda_device))
    err = capfd.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("[marlin]")]
    assert lines == [f"[marlin] first dispatch ok: BT={case.M} N={case.N} K={case.K} "
                     f"gs={case.group_size}"]
    assert [r.path for r in qg.records] == ["marlin_asym"] * 3


def test_second_process_loads_the_cached_build(ext):
    from harness.kernels.build import build_info

    info = build_info()
    arch = "sm_{}{}".format(*torch.cuda.get_device_capability())
    assert info.arch == arch
    code = ("from harness.kernels.build import extension, build_info; extension(); "
            "import json, dataclasses; print(json.dumps(dataclasses.asdict(build_info())))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    second = json.loads(out.stdout.strip().splitlines()[-1])
    assert second["cached"] is True and second["name"] == info.name
    assert second["load_seconds"] < 10.0


def test_tinygemm_signature_is_recorded(cuda_device, gpu_out_dir):
    from harness.kernels.tinygemm import op_schemas

    path = PATHS.get("tinygemm")
    reason = path.unavailable_reason(cuda_device)
    if reason:
        pytest.skip(reason)
    schemas = op_schemas()
    (gpu_out_dir / "tinygemm_schemas.json").write_text(json.dumps(schemas, indent=2))
    assert re.search(r"_convert_weight_to_int4pack\(Tensor self, int innerKTiles\)",
                     schemas["_convert_weight_to_int4pack"])


def _time_us(fn, reps=25, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def test_write_parity_table(data_cache, ext, cuda_device, gpu_out_dir):
    from harness.kernels.build import build_info

    rows = []
    for case in PARITY:
        A, w, ref = data_cache(case)
        d = decide_for_case(case, cuda_device, ON)
        for path in PATHS.select(None):
            row = {"case": case.id, "tags": ";".join(t for t in case.tags if t != "parity"),
                   "path": path.name, "time_us": "", "marlin_only_us": "", "rel_err": "",
                   "max_ulp": "", "taken": "",
                   "dispatch": d.path + (f" ({d.fallback_reason})" if d.fallback_reason else "")}
            reason = path.unavailable_reason(cuda_device)
            if reason:
                row["taken"] = f"unavailable: {reason}"
                rows.append(row)
                continue
            status, acc, detail = _measure(path, case, A, w, ref, cuda_device)
            if status != "ok":
                row["taken"] = f"unsupported: {detail}" if status == "unsupported" else \
                    f"rc={detail.rc} ({detail.detail})"
                rows.append(row)
                continue
            prepared = detail
            Ain = A.to(prepared.input_dtype)
            out = torch.empty(case.M, case.N, dtype=prepared.output_dtype, device=cuda_device)
            t = _time_us(lambda p=path, pr=prepared, a=Ain, o=out: p.run(pr, a, o))
            only = getattr(path, "run_marlin_only", None)
            if only is not None:
                t_only = _time_us(lambda f=only, pr=prepared, a=Ain, o=out: f(pr, a, o))
                row["marlin_only_us"] = f"{t_only:.1f}"
            row.update(time_us=f"{t:.1f}",
                       rel_err=f"{acc.rel_err:.2e}", max_ulp=f"{acc.max_ulp:.1f}", taken=path.name)
            rows.append(row)
    assert len(rows) == len(PARITY) * len(PATHS.names())
    with open(gpu_out_dir / "parity_table.csv", "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    info = build_info()
    header = [f"device: {torch.cuda.get_device_name()} ({info.arch}); torch {torch.__version__}; "
              f"CUDA {torch.version.cuda}", "build: " + json.dumps(asdict(info)), ""]
    (gpu_out_dir / "parity_table.md").write_text("\n".join(header + lines) + "\n")
    print("\n".join(header + lines))


def test_write_edges_dispatch_table(data_cache, marlin_ext, cuda_device, gpu_out_dir, gates):
    lines = ["| case | tags | path taken | marlin gs | marlin rc | fallback reason | rel_err "
             "| time_us |",
             "|---|---|---|---|---|---|---|---|"]
    for case in EDGES:
        A, w, ref = data_cache(case)
        qg = QuantGemm(w, cuda_device, ON)
        out = _poison(case.M, case.N, cuda_device)
        rec = qg(A, out)
        torch.cuda.synchronize()
        acc = accuracy_stats(out, ref)
        assert acc.passes(gates[0](rec.path, case)), (rec, acc)
        t = _time_us(lambda q=qg, a=A, o=out: q(a, o), reps=10)
        tags = ";".join(x for x in case.tags if x != "edges")
        lines.append(f"| {case.id} | {tags} | {rec.path} | {rec.marlin_groupsize} "
                     f"| {rec.marlin_rc} | "
                     f"{rec.fallback_reason} | {acc.rel_err:.2e} | {t:.1f} |")
    (gpu_out_dir / "edges_dispatch.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def test_marlin_split_k_diagnostic(data_cache, marlin_ext, cuda_device, gpu_out_dir):
    """Marlin + correction with all SMs (split-K, fp16 partial sums) vs one block (no split):
    records both errors so the report can attribute Marlin's error growth."""
    ids = ("M48-N1024-K4096-g128-s1", "M64-N2048-K8192-g128-s1", "M64-N1024-K2048-gK-s1")
    results = {}
    for case in (c for c in PARITY if c.id in ids):
        A, w, ref = data_cache(case)
        gs = marlin_groupsize_for(case.group_size, case.K)
        pack = marlin_pack_asymmetric(w, formula=PROVIDERS["quanto"].formula(gs))
        ws = torch.zeros(workspace_entries(case.N), dtype=torch.int32, device=cuda_device)
        for sms in (-1, 1):
            C = _poison(case.M, case.N, cuda_device)
            rc = marlin_ext.marlin_gemm(A, pack.B, C, pack.scales, pack.sz, ws, gs, -1, -1, sms, 16)
            assert rc == 0
            marlin_ext.apply_correction(A, C, pack.delta)
            acc = accuracy_stats(C, ref)
            assert acc.nonfinite == 0
            results[f"{case.id} sms={sms}"] = acc.rel_err
    (gpu_out_dir / "marlin_splitk.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    assert len(results) == 2 * len(ids)
