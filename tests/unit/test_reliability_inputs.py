"""Issue 7, bad inputs: every malformed file, bad value or bad output ends in a clear verdict.

Result and baseline files (CSV and json): missing, malformed, wrong schema version, missing
column, non-numeric value -> one-line ``SchemaError`` naming the file and the field, also
through the ``harness`` command line (exit 2). A missing baseline row is MISSING. NaN/Inf
outputs fail accuracy; outputs are NaN-poisoned before every accuracy run. A GPU of the
wrong arch is skipped with the reason; ``--force`` records the real arch. Filters are
parsed, never eval'ed (see also tests/unit/test_filters.py).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import replace

import pytest
import torch
from planted.defects import FaultPath

from harness.cases.case import GemmCase
from harness.cli import main
from harness.config import load_settings
from harness.kernels.base import GemmPath, PathRegistry, Prepared, int4_weight_bytes
from harness.kernels.registry_load import load_all
from harness.measure.runner import RunContext, Runner
from harness.reports.gate import Verdict, evaluate
from harness.reports.synthetic import make_rows
from harness.results.baseline import (
    BaselineMeta,
    BaselineNotFoundError,
    load_baseline,
    read_baseline_matrix,
    write_baseline_matrix,
)
from harness.results.environment import Environment
from harness.results.schema import SchemaError
from harness.results.store import RunMeta, read_meta, read_rows, rows_to_csv_text, write_run
from harness.results.writer import RowWriter

S = load_settings("default")
FAST = {"warmup_ms": 1, "max_case_seconds": 0.03, "min_samples": 3, "max_samples": 20,
        "target_rel_spread": 0.05}
SET = [a for k, v in FAST.items() for a in ("--set", f"{k}={v}")]
ENV = Environment(arch="sm90", gpu_name="NVIDIA H200", torch="2.11.0", cuda="13.0", commit="c" * 40)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def rows():
    return make_rows(shapes=((2048, 2048, 128),), ms=(1, 16), seed=7)


def _one_line(exc: BaseException, *needles: str) -> str:
    msg = str(exc)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


# --------------------------------------------------------------------------- CSV mutations
def _edit_csv(text: str, column: str, value: str | None) -> str:
    """Set ``column`` of the first data row to ``value``; None drops the column."""
    table = list(csv.reader(io.StringIO(text)))
    i = table[0].index(column)
    if value is None:
        table = [r[:i] + r[i + 1:] for r in table]
    else:
        table[1][i] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(table)
    return buf.getvalue()


#: (id, column, new value or None to drop it, the text the error must name)
CSV_FAULTS = [
    ("wrong-schema-version", "schema_version", "9", "schema_version 9 is not supported"),
    ("schema-version-not-a-number", "schema_version", "v1", "'schema_version'"),
    ("missing-column", "rel_err", None, "missing column 'rel_err'"),
    ("non-numeric-float", "time_us_median", "fast",
     "field 'time_us_median' has a non-float value 'fast'"),
    ("non-numeric-int", "n_samples", "many", "field 'n_samples' has a non-int value 'many'"),
    ("non-numeric-M", "M", "sixteen", "field 'M' has a non-int value"),
    ("bad-bool", "clock_dropped", "maybe", "'clock_dropped'"),
    ("bad-status", "status", "great", "field 'status' is 'great'"),
]


@pytest.mark.parametrize("column, value, needle", [c[1:] for c in CSV_FAULTS],
                         ids=[c[0] for c in CSV_FAULTS])
def test_bad_result_csv_names_file_and_field(tmp_path, rows, column, value, needle):
    path = tmp_path / "run.csv"
    path.write_text(_edit_csv(rows_to_csv_text(rows), column, value))
    with pytest.raises(SchemaError) as exc:
        read_rows(path)
    _one_line(exc.value, str(path), needle)


@pytest.mark.parametrize("column, value, needle", [c[1:] for c in CSV_FAULTS],
                         ids=[c[0] for c in CSV_FAULTS])
def test_bad_baseline_csv_names_file_and_field(tmp_path, rows, column, value, needle):
    """A baseline whose json checksum matches a bad CSV (e.g. from another harness version)."""
    d = tmp_path / "sm90"
    write_baseline_matrix(d, rows, BaselineMeta("synthetic", "sm90", ENV, rows_sha256=""))
    bad = _edit_csv((d / "synthetic.csv").read_text(), column, value)
    (d / "synthetic.csv").write_text(bad)
    meta = json.loads((d / "synthetic.json").read_text())
    import hashlib
    meta["rows_sha256"] = hashlib.sha256(bad.encode()).hexdigest()
    (d / "synthetic.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaError) as exc:
        load_baseline(d)
    _one_line(exc.value, str(d / "synthetic.csv"), needle)


def test_result_csv_missing_empty_binary_torn(tmp_path, rows):
    with pytest.raises(SchemaError) as exc:
        read_rows(tmp_path / "none.csv")
    _one_line(exc.value, str(tmp_path / "none.csv"), "result CSV not found")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SchemaError) as exc:
        read_rows(tmp_path / "empty.csv")
    _one_line(exc.value, "empty.csv", "no header row")
    (tmp_path / "bin.csv").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(SchemaError) as exc:
        read_rows(tmp_path / "bin.csv")
    _one_line(exc.value, "bin.csv", "not UTF-8")
    text = rows_to_csv_text(rows)
    (tmp_path / "short.csv").write_text(text + "synthetic,M1-N2048\n")
    with pytest.raises(SchemaError) as exc:
        read_rows(tmp_path / "short.csv")
    _one_line(exc.value, "short.csv:", "field 'path' is missing")


def test_edited_baseline_csv_is_refused_naming_both_files(tmp_path, rows):
    d = tmp_path / "sm90"
    write_baseline_matrix(d, rows, BaselineMeta("synthetic", "sm90", ENV, rows_sha256=""))
    p = d / "synthetic.csv"
    p.write_text(p.read_text().replace("marlin_asym", "marlin_asyn", 1))
    with pytest.raises(SchemaError) as exc:
        read_baseline_matrix(d, "synthetic")
    _one_line(exc.value, str(p), "rows_sha256", "synthetic.json")


# --------------------------------------------------------------------------- json files
JSON_FAULTS = {
    "run": [
        ("malformed", '{"schema_version": 1, "matrix": ', "malformed JSON at line 1"),
        ("not-an-object", "[1, 2]", "top level must be a JSON object"),
        ("wrong-schema-version", '{"schema_version": 9, "matrix": "m"}',
         "schema_version 9 is not supported"),
        ("schema-version-text", '{"schema_version": "1", "matrix": "m"}', "'schema_version'"),
        ("missing-field", '{"schema_version": 1}', "field 'matrix'"),
        ("non-numeric", '{"schema_version": 1, "matrix": "m", "ceilings": {"copy_gbps": "fast"}}',
         "field 'ceilings.copy_gbps' is not a number"),
        ("bad-environment", '{"schema_version": 1, "matrix": "m", "environment": 7}',
         "'environment'"),
    ],
    "baseline": [
        ("malformed", "{", "malformed JSON at line 1"),
        ("wrong-schema-version", '{"schema_version": 2}',
         "field 'schema_version' is 2, expected 1"),
        ("missing-field", '{"schema_version": 1, "matrix": "synthetic", "arch": "sm90"}',
         "field 'rows_sha256'"),
        ("non-numeric", '{"schema_version": 1, "matrix": "synthetic", "arch": "sm90",'
         ' "rows_sha256": "x", "noise_margins": {"c|p|graph": "wide"}}',
         "field 'noise_margins.c|p|graph' is not a non-negative"),
        ("bad-margin-key", '{"schema_version": 1, "matrix": "synthetic", "arch": "sm90",'
         ' "rows_sha256": "x", "noise_margins": {"c|p": 0.1}}',
         "field 'noise_margins' has a bad key"),
    ],
}


@pytest.mark.parametrize("text, needle", [c[1:] for c in JSON_FAULTS["run"]],
                         ids=[c[0] for c in JSON_FAULTS["run"]])
def test_bad_run_json_names_file_and_field(tmp_path, text, needle):
    path = tmp_path / "smoke.json"
    path.write_text(text)
    with pytest.raises(SchemaError) as exc:
        read_meta(path)
    _one_line(exc.value, str(path), needle)


@pytest.mark.parametrize("text, needle", [c[1:] for c in JSON_FAULTS["baseline"]],
                         ids=[c[0] for c in JSON_FAULTS["baseline"]])
def test_bad_baseline_json_names_file_and_field(tmp_path, rows, text, needle):
    d = tmp_path / "sm90"
    write_baseline_matrix(d, rows, BaselineMeta("synthetic", "sm90", ENV, rows_sha256=""))
    (d / "synthetic.json").write_text(text)
    with pytest.raises(SchemaError) as exc:
        load_baseline(d)
    _one_line(exc.value, str(d / "synthetic.json"), needle)


def test_missing_baseline_files_name_the_path(tmp_path, rows):
    with pytest.raises(BaselineNotFoundError) as exc:
        load_baseline(tmp_path / "nowhere")
    _one_line(exc.value, str(tmp_path / "nowhere"))
    d = tmp_path / "sm90"
    write_baseline_matrix(d, rows, BaselineMeta("synthetic", "sm90", ENV, rows_sha256=""))
    with pytest.raises(BaselineNotFoundError) as exc:
        load_baseline(d, ["production"])
    _one_line(exc.value, str(d / "production.csv"), "'production'")
    (d / "synthetic.json").unlink()
    with pytest.raises(SchemaError) as exc:
        load_baseline(d)
    _one_line(exc.value, str(d / "synthetic.json"), "baseline json not found")


def test_report_command_with_a_bad_baseline_exits_2_with_one_line(tmp_path, rows, capsys):
    write_run(tmp_path / "run", rows, RunMeta(matrix="synthetic", commit=ENV.commit, arch="sm90",
                                              environment=ENV))
    d = tmp_path / "baselines" / "sm90"
    write_baseline_matrix(d, rows, BaselineMeta("synthetic", "sm90", ENV, rows_sha256=""))
    meta = json.loads((d / "synthetic.json").read_text())
    meta["noise_margins"] = {"a|b|graph": "wide"}
    (d / "synthetic.json").write_text(json.dumps(meta))
    rc = main(["report", str(tmp_path / "run"), "--baseline", str(tmp_path / "baselines"),
               "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0
    assert err.startswith("harness report: error: ") and str(d / "synthetic.json") in err
    assert "noise_margins.a|b|graph" in err and not (tmp_path / "rep").exists()


def _bench(tmp_path, *extra: str) -> list[str]:
    return ["bench", "--cpu", "--matrix", "smoke", "--filter", "M == 1", "--paths", "native_int4",
            "--out", str(tmp_path / "results"), "--baselines", str(tmp_path / "baselines"),
            "--no-progress", *SET, *extra]


@pytest.fixture()
def commit(monkeypatch):
    monkeypatch.setenv("HARNESS_COMMIT", "reliability")
    return "reliability"


def test_bench_with_a_corrupt_baseline_exits_2_naming_it(tmp_path, commit, capsys):
    d = tmp_path / "baselines" / "cpu"
    d.mkdir(parents=True)
    (d / "smoke.csv").write_text("not,a,result\n")
    (d / "smoke.json").write_text("{")
    rc = main(_bench(tmp_path))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0
    assert str(d / "smoke.json") in err and "malformed JSON" in err
    # measured first
    assert len(read_rows(tmp_path / "results" / commit / "cpu" / "smoke.csv")) == 1


def test_resume_of_a_corrupt_result_csv_exits_2_and_leaves_it(tmp_path, commit, capsys):
    assert main(_bench(tmp_path, "--no-compare")) == 0
    csv_path = tmp_path / "results" / commit / "cpu" / "smoke.csv"
    bad = _edit_csv(csv_path.read_text(), "rel_err", "tiny")
    csv_path.write_text(bad)
    capsys.readouterr()
    assert main(_bench(tmp_path, "--no-compare", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{csv_path}:2" in err and "'rel_err'" in err
    assert csv_path.read_text() == bad
    with RowWriter(csv_path.parent / "other.csv") as w:   # the lock was released
        assert w.done_keys == frozenset()


# --------------------------------------------------------------------------- gate inputs
def test_a_missing_baseline_row_is_missing_and_fails(rows):
    cur = [r for r in rows if not (r.path == "marlin_asym" and r.M == 16)]
    result = evaluate(cur, rows, S)
    missing = result.of(Verdict.MISSING)
    assert [(v.path, v.row.M) for v in missing] == [("marlin_asym", 16)]
    assert missing[0].fails and result.exit_code == 1
    assert "in the baseline but not in this run" in missing[0].reason
    gone = [replace(r, status="unavailable", error="no GPU")
            if r.path == "marlin_asym" and r.M == 16 else r for r in rows]
    v = [v for v in evaluate(gone, rows, S).verdicts if v.verdict == Verdict.MISSING]
    assert len(v) == 1 and v[0].fails and "unavailable now (no GPU)" in v[0].reason
    assert evaluate(cur, rows, S, partial=True).exit_code == 1    # same case ran: still MISSING


def test_non_finite_accuracy_never_passes_the_gate(rows):
    victim = next(r for r in rows if r.path == "native_int4")
    for bad in (replace(victim, nonfinite=3, rel_err=math.inf),
                replace(victim, rel_err=math.nan), replace(victim, rel_err=math.inf),
                replace(victim, rel_err=math.nan, max_ulp=math.nan, p99_ulp=math.nan)):
        cur = [bad if r.key == victim.key else r for r in rows]
        for base in (rows, []):                      # with a baseline, and a first run
            v = next(v for v in evaluate(cur, base, S).verdicts if v.key == victim.key)
            assert v.verdict == Verdict.WORSE_ACCURACY and v.fails, (bad.rel_err, v.reasons)
            assert "non-finite" in v.reason or "no finite accuracy" in v.reason


# --------------------------------------------------------------------------- runner outputs
CASE = GemmCase(M=4, N=256, K=256, group_size=128, seed=3)


def _run(*paths: GemmPath, cases=(CASE,), settings=None):
    reg = PathRegistry()
    for p in paths:
        reg.register(p)
    ctx = RunContext(matrix="unit", device=CPU, settings=settings or load_settings(overrides=FAST),
                     modes=("cpu",), registry=reg, arch="cpu", device_name="cpu", commit="t")
    return Runner(ctx).run(list(cases))


def _native():
    return load_all().get("native_int4")


@pytest.mark.parametrize("fault", ["nan", "inf"])
def test_a_nan_or_inf_output_element_is_an_error(fault):
    row = _run(FaultPath(_native(), fault))[0]
    assert row.status == "error" and row.nonfinite == 1
    assert "1 of 1024 output elements are non-finite" in row.error
    assert math.isinf(row.rel_err)                     # never an average that hides it
    v = evaluate([row], [], S).verdicts[0]
    assert v.verdict == Verdict.ERROR and v.fails


class Spy(GemmPath):
    """Records whether ``out`` was all NaN on entry to every call."""

    name, description = "spy", "records the state of out"
    weight_formula = "int4 K*N/2 + fp16 scale G*N*2 + fp16 zero G*N*2"

    def weight_bytes(self, K, N, groups):       # the byte model the roofline asks for
        return int4_weight_bytes(K, N, groups, 4)

    def __init__(self):
        self.calls: list[tuple[float, bool]] = []

    def unavailable_reason(self, device):
        return None

    def prepare(self, weight, device):
        return Prepared(self.name, weight, device,
                        state={"W": weight.dequantize(torch.float64).float()})

    def run(self, prepared, A, out):
        self.calls.append((float(A[0, 0]), bool(torch.isnan(out).all())))
        out.copy_(A.float() @ prepared.state["W"])
        return out


def test_outputs_are_poisoned_before_every_accuracy_run():
    spy = Spy()
    row = _run(spy)[0]
    assert row.status == "ok"
    first_A, first_poisoned = spy.calls[0]
    fresh_A, fresh_poisoned = spy.calls[-1]
    assert first_poisoned and fresh_poisoned           # accuracy run and fresh re-check
    assert fresh_A != first_A                          # the re-check used fresh activations
    assert len(spy.calls) > 3                          # timing calls in between


def test_a_kernel_skipping_part_of_c_is_caught():
    row = _run(FaultPath(_native(), "skip_last_n_tile"))[0]
    assert row.status == "error" and row.nonfinite == CASE.M * 128
    assert "unwritten or NaN" in row.error
    # Correct on the first run, then skipping: the second of the accuracy runs on identical
    # inputs catches it ...
    late = _run(FaultPath(_native(), "skip_last_n_tile", when=lambda M, i: i > 0))[0]
    assert late.status == "error" and late.nonfinite == CASE.M * 128
    assert "run 2 of 5 on identical inputs" in late.error
    # ... and with one accuracy run, the poisoned fresh re-check after timing does.
    one = load_settings(overrides={**FAST, "accuracy_runs": 1})
    late = _run(FaultPath(_native(), "skip_last_n_tile", when=lambda M, i: i > 0), settings=one)[0]
    assert late.status == "error" and late.nonfinite == 0
    assert "fresh inputs" in late.error and f"{CASE.M * 128} of {CASE.M * 256}" in late.error


# --------------------------------------------------------------------------- command line
def test_filters_are_parsed_never_evaluated(tmp_path, commit, capsys):
    """See tests/unit/test_filters.py for the grammar; here the bench command line."""
    marker = tmp_path / "pwned"
    rc = main(["bench", "--cpu", "--matrix", "smoke", "--out", str(tmp_path / "r"),
               "--filter", f"__import__('os').system('touch {marker}')"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "Call is not allowed" in err
    assert not marker.exists() and not (tmp_path / "r").exists()


def test_wrong_arch_is_skipped_and_force_records_the_real_arch(tmp_path, commit, capsys,
                                                              monkeypatch):
    from harness.measure import envinfo

    monkeypatch.setattr(envinfo, "arch_label", lambda device: "sm89")   # the GPU "detected"
    args = ["bench", "--arch", "sm90", "--matrix", "smoke", "--filter", "M == 1", "--paths",
            "native_int4", "--out", str(tmp_path / "r"), "--no-progress", "--no-compare", *SET]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "expected arch sm90, but the visible GPU is sm89; skipped" in out
    assert not (tmp_path / "r").exists()
    assert main(args + ["--force"]) == 0
    out = capsys.readouterr().out
    assert "--force: running on sm89 (expected sm90); rows record sm89" in out
    got = read_rows(tmp_path / "r" / commit / "sm89" / "smoke.csv")
    # one row per timing mode: cpu on a CPU, cold and graph on a GPU
    assert got and {r.arch for r in got} == {"sm89"}
    assert not (tmp_path / "r" / commit / "sm90").exists()
    assert read_meta(tmp_path / "r" / commit / "sm89" / "smoke.json").arch == "sm89"


def test_a_schema_1_csv_still_reads_with_the_determinism_columns_unmeasured(tmp_path, rows):
    """Schema 2 added the run-to-run columns; a stored schema-1 CSV (every committed
    baseline before them) reads, upgraded, with accuracy_runs 0 (= not measured)."""
    from harness.results.schema import ADDED_IN_2, ADDED_IN_3, RESULT_SCHEMA_VERSION

    table = list(csv.reader(io.StringIO(rows_to_csv_text(rows))))
    keep = [i for i, c in enumerate(table[0]) if c not in ADDED_IN_2 and c not in ADDED_IN_3]
    v = table[0].index("schema_version")
    table = [table[0]] + [[("1" if i == v else c) for i, c in enumerate(r)] for r in table[1:]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in keep] for r in table])
    path = tmp_path / "old.csv"
    path.write_text(buf.getvalue())
    got = read_rows(path)
    assert len(got) == len(rows)
    assert all(r.accuracy_runs == 0 and r.distinct_outputs == 0 and r.nondeterminism_note == ""
               for r in got)
    assert all(r.schema_version == RESULT_SCHEMA_VERSION for r in got)
    # a schema-2 file must carry the new columns
    path.write_text(_edit_csv(rows_to_csv_text(rows), "accuracy_runs", None))
    with pytest.raises(SchemaError, match="missing column 'accuracy_runs'"):
        read_rows(path)


def test_a_schema_2_csv_reads_with_the_rms_ulp_columns_unmeasured(tmp_path, rows):
    """Schema 3 added rms_ulp_p99 / rms_ulp_max; a schema-2 CSV (the committed baselines)
    reads them as NaN, which the gate does not compare (LESS_ACCURATE then rests on rel_err)."""
    from harness.results.schema import ADDED_IN_3, RESULT_SCHEMA_VERSION

    assert RESULT_SCHEMA_VERSION == 5 and set(ADDED_IN_3) == {"rms_ulp_p99", "rms_ulp_max"}
    text = rows_to_csv_text(rows)
    for column in ADDED_IN_3:
        text = _edit_csv(text, column, None)
    table = list(csv.reader(io.StringIO(text)))
    v = table[0].index("schema_version")
    table = [table[0]] + [[("2" if i == v else c) for i, c in enumerate(r)] for r in table[1:]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(table)
    path = tmp_path / "v2.csv"
    path.write_text(buf.getvalue())
    old = read_rows(path)
    assert len(old) == len(rows) and all(r.schema_version == RESULT_SCHEMA_VERSION for r in old)
    assert all(math.isnan(r.rms_ulp_p99) and math.isnan(r.rms_ulp_max) for r in old)
    assert [r.accuracy_runs for r in old] == [r.accuracy_runs for r in rows]
    # gated against it: rms ULPs not compared, rel_err still is
    worse_rms = [replace(r, rms_ulp_p99=r.rms_ulp_p99 + 50) for r in rows]
    result = evaluate(worse_rms, old, S)
    assert result.passed and not any("rms_ulp" in x for v in result.verdicts for x in v.reasons)
    tripled = [replace(r, rel_err=r.rel_err * 3) if r.path == "native_int4" else r for r in rows]
    less = evaluate(tripled, old, S).of(Verdict.LESS_ACCURATE)
    assert less and {v.path for v in less} == {"native_int4"}
    # a schema-3 file must carry them
    path.write_text(_edit_csv(rows_to_csv_text(rows), "rms_ulp_p99", None))
    with pytest.raises(SchemaError, match="missing column 'rms_ulp_p99'"):
        read_rows(path)


def test_the_committed_baselines_still_read_and_gate_against_themselves():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "baselines" / "sm90"
    paths = sorted(root.glob("*.csv"))
    assert paths
    for csv_path in paths:
        got = read_rows(csv_path)
        header = csv_path.read_text().splitlines()[0].split(",")
        if "rms_ulp_p99" not in header:                     # written before schema 3
            assert all(math.isnan(r.rms_ulp_p99) and math.isnan(r.rms_ulp_max) for r in got)
        result = evaluate(got, got, S)
        assert not result.of(Verdict.LESS_ACCURATE), csv_path.name
        assert not result.of(Verdict.WORSE_ACCURACY), csv_path.name


def test_a_schema_4_csv_reads_with_the_device_columns_not_recorded(tmp_path, rows):
    """Schema 5 added gpu_index / gpu_uuid (the device that measured a row); a schema-4 CSV
    (the committed baselines) reads them as -1 and empty, and a schema-5 file must have them."""
    from harness.results.schema import ADDED_IN_5, RESULT_SCHEMA_VERSION

    assert RESULT_SCHEMA_VERSION == 5 and set(ADDED_IN_5) == {"gpu_index", "gpu_uuid"}
    text = rows_to_csv_text([replace(r, gpu_index=3, gpu_uuid="GPU-x") for r in rows])
    for column in ADDED_IN_5:
        text = _edit_csv(text, column, None)
    path = tmp_path / "v5-missing.csv"
    path.write_text(text)
    with pytest.raises(SchemaError, match="missing column 'gpu_index'"):
        read_rows(path)
    table = list(csv.reader(io.StringIO(text)))
    v = table[0].index("schema_version")
    table = [table[0]] + [[("4" if i == v else c) for i, c in enumerate(r)] for r in table[1:]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(table)
    path.write_text(buf.getvalue())
    old = read_rows(path)
    assert len(old) == len(rows) and all(r.schema_version == RESULT_SCHEMA_VERSION for r in old)
    assert {(r.gpu_index, r.gpu_uuid) for r in old} == {(-1, "")}
