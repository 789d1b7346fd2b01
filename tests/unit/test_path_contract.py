"""The path contract and the kernels' layout, on a CPU.

Every built-in path answers the whole contract (``harness.kernels.base.GemmPath``) itself;
wrappers and pair paths answer it from the path they wrap; the roofline and the runner ask
the path; the gate tells a lost Marlin dispatch from the row's ``dispatch_marlin`` (the
old name rule only for rows stored before it); and the kernels package has no import
cycle, a dispatcher model that loads no path module, and function-level imports only
where a dependency is optional (the CUDA extension build).
"""

from __future__ import annotations

import ast
import csv
import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from planted.paths import SlowdownPath, WrongSignDeltaPath

from harness.cases.case import GemmCase
from harness.config import load_settings
from harness.kernels import registry_load
from harness.kernels.base import FP16_GATE, PathRegistry
from harness.kernels.marlin.variants import VARIANTS
from harness.kernels.swiglu_pair import FUSED_NAME, paths_for_case
from harness.reports.gate import Verdict, evaluate
from harness.reports.synthetic import make_rows
from harness.results.schema import RESULT_SCHEMA_VERSION, ResultRow
from harness.results.store import read_rows, rows_to_csv_text

KERNELS = Path(registry_load.__file__).resolve().parent
GROUPED = GemmCase(M=16, N=256, K=512, group_size=128, seed=1)
PER_ROW = GemmCase(M=16, N=256, K=512, group_size=512, seed=1)
PAIR = GemmCase(M=16, N=256, K=512, group_size=128, seed=1, kind="swiglu_pair")
MARLIN = {"marlin_asym", "marlin_fused_zero"}


# --------------------------------------------------------------------------- the contract
@pytest.mark.parametrize("name", ["native_int4", "fp16_cache", "marlin_asym", "tinygemm",
                                  "marlin_fused_zero"])
def test_every_builtin_path_answers_the_contract(name):
    path = registry_load.load_all().get(name)
    assert path.name == name and path.role in ("path", "peer") and path.description
    assert path.kinds == ("gemm",) and set(path.device_types) <= {"cpu", "cuda"}
    assert path.is_marlin == (name in MARLIN)
    assert path.weight_formula and path.weight_bytes(512, 256, 4) > 0
    bm, pair = path.bytes_moved(GROUPED), path.bytes_moved(PAIR)
    assert bm.total == bm.weight + 16 * 512 * 2 + 16 * 256 * 2 and bm.formula == path.weight_formula
    assert pair.weight == 2 * bm.weight                         # a SwiGLU pair holds two weights
    assert path.flops(GROUPED) == GROUPED.flops and path.flops(PAIR) == 2 * GROUPED.flops
    for case in (GROUPED, PER_ROW):
        bound, why = path.error_bound(case)
        assert bound >= FP16_GATE and (why == "") == (bound == FP16_GATE)
    assert isinstance(path.nondeterminism, str) and bool(path.nondeterminism) == (name in MARLIN)
    assert path.variants == (tuple(VARIANTS) if name == "marlin_asym" else ())
    reason = path.unavailable_reason(torch.device("cpu"))
    assert (reason is None) == ("cpu" in path.device_types)


def test_error_bounds_live_with_their_paths(monkeypatch):
    reg = registry_load.load_all()
    assert reg.get("tinygemm").error_bound(GROUPED)[0] == 1e-2
    assert reg.get("marlin_fused_zero").error_bound(PER_ROW)[0] == 2.5e-3
    monkeypatch.delenv("HARNESS_MARLIN_PROVIDER", raising=False)          # quanto: q * s per-row
    assert reg.get("marlin_asym").error_bound(PER_ROW)[0] == 1.2e-2
    assert reg.get("marlin_asym").error_bound(GROUPED)[0] == 2.5e-3
    monkeypatch.setenv("HARNESS_MARLIN_PROVIDER", "upstream")             # (q - 8) * s everywhere
    assert reg.get("marlin_asym").error_bound(PER_ROW)[0] == 2.5e-3


def test_arch_reason_reads_the_declared_devices():
    cpu = torch.device("cpu")
    assert "CUDA GPUs only" in registry_load.load_all().get("marlin_fused_zero").arch_reason(cpu)
    assert registry_load.load_all().get("marlin_asym").arch_reason(cpu) is None


def test_wrappers_and_pair_paths_answer_from_the_inner_path():
    reg = registry_load.load_all()
    marlin = reg.get("marlin_asym")
    for other in (SlowdownPath(marlin), *paths_for_case(PAIR, [marlin])):
        assert other.is_marlin and other.weight_formula == marlin.weight_formula
        assert other.error_bound(PER_ROW) == marlin.error_bound(PER_ROW)
        assert other.weight_bytes(512, 256, 4) == marlin.weight_bytes(512, 256, 4)
    pairs = paths_for_case(PAIR, [reg.get("native_int4")])
    assert [p.name for p in pairs] == ["native_int4", FUSED_NAME]
    assert not any(p.is_marlin for p in pairs)
    assert pairs[1].bytes_moved(PAIR) == reg.get("native_int4").bytes_moved(PAIR)


def test_is_marlin_asks_the_path_the_dispatcher_named():
    assert registry_load.is_marlin("marlin_asym") and not registry_load.is_marlin("native_int4")
    assert not registry_load.is_marlin(FUSED_NAME)               # quant_swiglu: never Marlin
    with pytest.raises(ValueError, match="unknown path 'nope'"):
        registry_load.is_marlin("nope")
    reg = PathRegistry()
    planted = reg.register(WrongSignDeltaPath())
    assert registry_load.is_marlin("marlin_asym", reg) is planted.is_marlin is True


def test_registration_is_one_place_and_keeps_report_order():
    reg = registry_load.load_all()
    assert reg.names()[:5] == [cls.name for cls in registry_load.BUILTIN]
    for module in KERNELS.rglob("*.py"):                                 # no self-registration
        calls = [n for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "register"
                 and isinstance(n.func.value, ast.Name) and n.func.value.id == "PATHS"]
        assert not calls or module.name == "registry_load.py", module


# --------------------------------------------------------------------------- the gate's column
def _lost(rows_base, rows_cur):
    result = evaluate(rows_cur, rows_base, load_settings(overrides={"min_effect": 100.0}))
    return {(v.case_id, v.path) for v in result.of(Verdict.LOST_DISPATCH)}


def test_lost_dispatch_reads_dispatch_marlin_and_falls_back_to_the_name_for_old_rows():
    base = make_rows(shapes=((2048, 2048, 128),), ms=(16,), seed=3)
    assert {r.dispatch_path for r in base} == {"marlin_asym"}
    fell = [replace(r, dispatch_path="native_int4", fallback_reason="rc=2") for r in base]
    assert _lost(base, fell)                                     # old rows (None): the name rule
    new_base = [replace(r, dispatch_marlin=True) for r in base]
    assert _lost(new_base, [replace(r, dispatch_marlin=False) for r in fell])
    # the column wins over the name: a Marlin path whose name does not say so ...
    plugin = [replace(r, dispatch_path="fancy_int4", dispatch_marlin=True) for r in base]
    assert _lost(plugin, [replace(r, dispatch_marlin=False) for r in fell])
    # ... and a name that mentions marlin on a path that is not one
    named = [replace(r, dispatch_path="not_marlin_really", dispatch_marlin=False) for r in base]
    assert not _lost(named, [replace(r, dispatch_marlin=False) for r in fell])
    assert not _lost(new_base, new_base)


def test_dispatch_marlin_round_trips_and_old_files_read_it_as_unknown(tmp_path):
    rows = [replace(r, dispatch_marlin=v) for r, v in
            zip(make_rows(shapes=((2048, 2048, 128),), ms=(16,), seed=3)[:3], (True, False, None),
                strict=True)]
    path = tmp_path / "rows.csv"
    path.write_text(rows_to_csv_text(rows))
    assert [r.dispatch_marlin for r in read_rows(path)] == [True, False, None]
    table = list(csv.reader(io.StringIO(rows_to_csv_text(rows))))
    col, ver = table[0].index("dispatch_marlin"), table[0].index("schema_version")
    old = [[c for i, c in enumerate(r) if i != col] for r in table]      # a schema-3 file
    old = [old[0]] + [[("3" if i == ver - (ver > col) else c) for i, c in enumerate(r)]
                      for r in old[1:]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(old)
    path.write_text(buf.getvalue())
    got = read_rows(path)
    assert [r.dispatch_marlin for r in got] == [None] * 3
    assert all(r.schema_version == RESULT_SCHEMA_VERSION for r in got)   # upgraded in memory
    assert all(isinstance(r, ResultRow) and not math.isnan(r.rel_err) for r in got)


# --------------------------------------------------------------------------- the layout
def _kernel_imports():
    """{module: [(imported kernels module, inside a function?, source line)]} under
    harness.kernels."""
    out = {}
    for file in sorted(KERNELS.rglob("*.py")):
        rel = file.relative_to(KERNELS.parent.parent).with_suffix("")
        parts = list(rel.parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if file.name == "__init__.py" else module.rsplit(".", 1)[0]
        tree = ast.parse(file.read_text())
        lines = file.read_text().splitlines()
        funcs = {id(n) for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f)}
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            targets = {n for n in names if n.startswith("harness.kernels") and
                       (KERNELS.parent.parent / (n.replace(".", "/") + ".py")).exists()}
            for t in targets:
                found.append((t, id(node) in funcs, lines[node.lineno - 1]))
            if id(node) in funcs and not targets:
                found.append((names[0], True, lines[node.lineno - 1]))
        out[module] = found
    return out


def test_no_import_cycle_inside_kernels():
    graph = {m: {t for t, _, _ in imps if t.startswith("harness.kernels")}
             for m, imps in _kernel_imports().items()}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in graph.get(m, ()):
            if state.get(t) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(stack + [m, t])}")
            if t in graph and not state.get(t):
                visit(t, stack + [m])
        state[m] = 2

    for m in graph:
        if not state.get(m):
            visit(m, [])


def test_the_dispatcher_model_imports_no_path_module():
    imps = {t for t, _, _ in _kernel_imports()["harness.kernels.dispatch"]}
    assert imps <= {"harness.kernels.base", "harness.kernels.marlin",
                    "harness.kernels.marlin.facts"}, imps


def test_imports_inside_functions_only_for_optional_dependencies():
    inside = [(m, line.strip()) for m, imps in _kernel_imports().items()
              for _, fn, line in imps if fn]
    assert all(m == "harness.kernels.build" for m, _ in inside), inside   # the extension build only
    assert all("#" in line for _, line in inside), inside                 # each says why
