"""Reports (CSV, Markdown, HTML, crossover, plots), `harness compare` with a fake bench
runner in a real git repository, the CLI, and the no-torch rule of harness.reports."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from speed_repos import git, speed_repo

from harness.config import load_settings
from harness.engines.bench_runner import DATA_PLUGIN
from harness.engines.compare import (
    BenchRequest,
    CompareError,
    bench_command,
    case_filter,
    compare,
    subprocess_runner,
)
from harness.reports.comparison import pool_rows
from harness.reports.crossover import crossover, dispatch_rule
from harness.reports.csv_report import REPORT_SCHEMA_VERSION, report_frame, side_by_side_frame
from harness.reports.gate import Verdict, evaluate
from harness.reports.html_report import render_html
from harness.reports.markdown import markdown_summary, text_table
from harness.reports.plots import all_plots
from harness.reports.render import write_reports
from harness.reports.synthetic import make_rows, resample
from harness.results.environment import Environment
from harness.results.schema import column_names
from harness.results.store import RunMeta, load_run, write_run

S = load_settings("default")


def test_reports_and_results_never_import_torch():
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        import harness.reports, harness.results
        names = [f"{pkg.__name__}.{m.name}" for pkg in (harness.reports, harness.results)
                 for m in pkgutil.iter_modules(pkg.__path__)]
        for name in names:
            importlib.import_module(name)
        import harness.config
        from harness.reports.synthetic import make_rows
        from harness.reports.gate import evaluate
        from harness.reports.html_report import render_html
        rows = make_rows(ms=(1, 16))
        render_html(evaluate(rows, rows, harness.config.load_settings()))
        assert len(names) >= 17, names
        print("torch" in sys.modules, len(names))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, count = out.stdout.split()
    assert loaded == "False" and int(count) >= 17


def test_the_console_script_loads_without_torch():
    """``harness --help`` and the torch-free commands import no torch (the measuring
    commands load it inside ``run``)."""
    code = "import sys, harness.cli; harness.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def gated():
    base = make_rows(shapes=((2048, 2048, 128), (6144, 2048, 2048)), ms=(1, 16, 64), seed=8,
                     modes=("graph", "cold"))
    cur = resample(base, seed=9, factor={"marlin_asym": 1.05})
    key = ("M1-N2048-K2048-g128-s0", "fp16_cache", "graph")
    cur = [replace(r, rel_err=4e-3) if r.key == key else r for r in cur]
    return base, cur, evaluate(cur, base, S, current_label="cur", baseline_label="base")


def test_csv_report_has_metrics_verdicts_and_deltas(tmp_path, gated):
    base, cur, result = gated
    frame = report_frame(result)
    assert len(frame) == len(cur)
    assert set(c for c in column_names() if c != "samples_us") <= set(frame.columns)
    assert (frame["report_schema_version"] == REPORT_SCHEMA_VERSION).all()
    slower = frame[frame.verdict == "SLOWER"]
    assert set(slower.path) == {"marlin_asym"}
    assert len(slower) == sum(1 for r in cur if r.path == "marlin_asym")
    assert slower.delta_time_pct.between(3.5, 6.5).all()
    acc = frame[frame.verdict == "WORSE_ACCURACY"].iloc[0]
    assert acc.rel_err == 4e-3 and acc.baseline_rel_err < 1e-3 and acc.fails
    files = write_reports(result, tmp_path, "report", rows=cur)
    back = pd.read_csv(files.csv)
    assert len(back) == len(cur) and list(back.columns) == list(frame.columns)
    sbs = side_by_side_frame(result, ("A", "B"))
    assert {"A_time_us_median", "B_time_us_median", "A_rel_err", "B_rel_err"} <= set(sbs.columns)
    row = sbs[sbs.verdict == "SLOWER"].iloc[0]
    assert (row.B_time_us_median / row.A_time_us_median - 1
            == pytest.approx(row.delta_time_pct / 100))


def test_markdown_and_text(gated):
    _, _, result = gated
    md = markdown_summary(result, rule=[("N=2048 K=2048 g128 [graph]", "M=1: fp16_cache")])
    assert md.startswith("### INT4 GEMM gate: ❌")
    assert "**Regressions**" in md and "WORSE_ACCURACY" in md and "`M1-N2048-K2048-g128-s0`" in md
    assert md.index("WORSE_ACCURACY") < md.index("SLOWER |")  # worst first
    assert len(md.splitlines()) < 60
    ok = evaluate(gated[0], gated[0], S)
    assert markdown_summary(ok).startswith("### INT4 GEMM gate: ✅")
    table = text_table(result, changes_only=True)
    lines = table.splitlines()
    assert not any(line.startswith("SAME") for line in lines) and "FAIL (" in lines[-1]
    slower = result.of(Verdict.SLOWER)
    assert sum(1 for line in lines if line.startswith("SLOWER *")) == sum(v.fails for v in slower)
    # eager ("cold") speed is informational by default (gate_eager_speed = 0); graph fails
    assert all(v.fails == (v.mode == "graph") for v in slower if v.role == "path")


def test_html_is_self_contained_with_regressions_first(gated):
    _, cur, result = gated
    page = render_html(result, current_env=Environment(arch="sm90", gpu_name="synthetic H200"))
    lower = page.lower()
    assert "<script" not in lower and "<link" not in lower and "@import" not in lower
    assert 'src="http' not in lower and "url(http" not in lower
    assert page.count("<svg") == 5
    assert page.index('id="regressions"') < page.index('id="tables"') < page.index('id="crossover"')
    assert "FAIL (" in page and "WORSE_ACCURACY" in page and "matrix synthetic" in page
    assert "FP16 cache wins" in page and "Rule the data supports" in page


def test_reports_lead_with_rms_ulp_and_show_less_accurate():
    base = make_rows(shapes=((2048, 2048, 128),), ms=(1, 16), seed=8)
    key = ("M16-N2048-K2048-g128-s0", "native_int4", "graph")
    cur = [replace(r, rel_err=r.rel_err * 3, rms_ulp_p99=r.rms_ulp_p99 + 2.0) if r.key == key else r
           for r in base]
    result = evaluate(cur, base, S)
    (less,) = result.of(Verdict.LESS_ACCURATE)
    assert less.key == key and less.fails and less.delta_rms_ulp_p99 == pytest.approx(2.0)
    frame = report_frame(result)
    cols = list(frame.columns)
    assert (cols.index("delta_rel_err") < cols.index("delta_rms_ulp_p99")
            < cols.index("delta_max_ulp"))
    assert cols.index("baseline_rms_ulp_p99") < cols.index("baseline_max_ulp")
    row = frame[frame.verdict == "LESS_ACCURATE"].iloc[0]
    assert row.delta_rms_ulp_p99 == pytest.approx(2.0) and row.fails
    sbs = side_by_side_frame(result, ("A", "B"))
    assert {"A_rms_ulp_p99", "B_rms_ulp_p99", "delta_rms_ulp_p99"} <= set(sbs.columns)
    md = markdown_summary(result)
    assert "📉 LESS_ACCURATE" in md and "rms_ulp_p99" in md and "ulp_tolerance" not in md
    page = render_html(result)
    assert "LESS_ACCURATE" in page and "#f7c6a3" in page                # badge and verdict cell
    assert page.index("rms ULP p99") < page.index("elem. p99 ULP") < page.index("elem. max ULP")


def test_html_escapes_row_text():
    rows = make_rows(ms=(1,))
    bad = ([replace(rows[0], status="error", error="<script>alert(1)</script> & <b>x</b>")]
           + rows[1:])
    page = render_html(evaluate(bad, rows, S))
    assert "<script" not in page.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page


def test_html_renders_all_nan_cpu_rows():
    rows = make_rows(ms=(1, 16), cpu=True)  # no timings on a CPU, accuracy still measured
    page = render_html(evaluate(rows, [], S))
    assert "no finite tflops" in page and page.count("<svg") == 1 and 'id="plot-ulp"' in page
    assert "No baseline" in page and "PASS" in page
    blank = [replace(r, rel_err=math.nan, max_ulp=math.nan, p99_ulp=math.nan, rms_ulp_p99=math.nan,
                     rms_ulp_max=math.nan) for r in rows]
    plots = all_plots(blank)
    assert all(p.svg is None and p.note for p in plots)
    page = render_html(evaluate(blank, blank, S))
    assert "<svg" not in page and "Crossover" in page and "(none)" in page


def _row(path, m, t, rel=2e-4, role="path", status="ok", dispatch="marlin_asym"):
    base = make_rows(shapes=((2048, 2048, 128),), ms=(m,), paths=("marlin_asym",), peers=())[0]
    return replace(base, path=path, time_us_median=t, rel_err=rel, role=role, status=status,
                   dispatch_path=dispatch, samples_us="", n_samples=0)


def test_crossover_picks_the_fastest_correct_path():
    rows = [
        _row("native_int4", 1, 30.0), _row("fp16_cache", 1, 20.0),
        _row("marlin_asym", 1, 10.0, rel=3e-3),
        _row("tinygemm", 1, 5.0, role="peer"),
        _row("native_int4", 16, 40.0), _row("fp16_cache", 16, 21.0), _row("marlin_asym", 16, 15.0),
        _row("native_int4", 64, 90.0), _row("fp16_cache", 64, 25.0), _row("marlin_asym", 64, 30.0),
        _row("marlin_asym", 128, 30.0, status="error"), _row("native_int4", 128, 100.0),
    ]
    table = {r.M: r for r in crossover(rows, S.rel_err_gate)}
    assert table[1].fastest == "fp16_cache" and "marlin_asym: rel_err" in table[1].excluded
    assert table[1].best_peer == "tinygemm" and table[1].fp16_cache_wins is True
    assert table[1].agrees is False  # the dispatcher said marlin
    assert table[16].fastest == "marlin_asym" and table[16].lead == pytest.approx(21 / 15 - 1)
    assert table[16].fp16_cache_wins is False and table[16].agrees is True
    assert table[64].fastest == "fp16_cache"
    assert table[128].fastest == "native_int4" and table[128].fp16_cache_wins is None
    ((label, rule),) = dispatch_rule(list(table.values()))
    assert label == "N=2048 K=2048 g128 [graph]"
    assert rule == "M=1: fp16_cache; M=16: marlin_asym; M=64: fp16_cache; M=128: native_int4"


def test_plots_are_svg():
    rows = make_rows(ms=(1, 16, 64))
    plots = {p.key: p for p in all_plots(rows)}
    assert set(plots) == {"tflops", "pct_roofline", "ulp", "correction", "memory"}
    for p in plots.values():
        assert p.svg.startswith("<svg") and "</svg>" in p.svg and "roofline" in plots["tflops"].svg


def test_pool_rows_and_case_filter():
    rounds = [make_rows(ms=(16,), seed=s, n_samples=20) for s in range(3)]
    pooled = {r.key: r for r in pool_rows(rounds)}
    k = rounds[0][0].key
    assert pooled[k].n_samples == 60
    assert sorted(pooled[k].samples()) == pytest.approx(
        sorted(s for rs in rounds for s in rs[0].samples()))
    broken = [replace(rounds[1][0], status="error", error="boom")] + rounds[1][1:]
    assert {r.key: r for r in pool_rows([rounds[0], broken])}[k].status == "error"
    expr = case_filter(rounds[0][:1])
    from harness.cases import GemmCase, apply_filter

    cases = [GemmCase(16, 2048, 2048, 128), GemmCase(16, 2048, 2048, 128, seed=1),
             GemmCase(1, 2048, 2048, 128)]
    assert apply_filter(cases, expr) == cases[:1]


@pytest.mark.parametrize("matrix", ["production", "swiglu", "parity", "edges"])
def test_case_filter_fits_its_limits_for_any_subset(matrix):
    """A/B of every fp16_cache row of production (56 cases) once built a 5,424-character
    filter that the bench refused (limit 2,000): the A/B was lost. Any subset of a matrix
    now gives a filter that parses, selects at least the subset, and exactly it when small.
    """
    import random

    from harness.cases import MATRICES, apply_filter, compile_filter

    cases = MATRICES.cases(matrix)  # cases carry the fields case_filter reads
    rng = random.Random(7)
    assert case_filter(cases, cases) == ""
    for size in (1, 3, 8, len(cases) // 2, len(cases) - 1):
        for _ in range(5):
            sub = rng.sample(cases, size)
            expr = case_filter(sub, cases)
            compile_filter(expr)  # within the character and node limits
            got = set(apply_filter(cases, expr))
            assert got >= set(sub), expr
            if size <= 8:
                assert got == set(sub), expr
    # without the universe it is exact (every field named) while that fits
    assert set(apply_filter(cases, case_filter(cases[:2]))) == set(cases[:2])


def test_bench_command_line():
    req = BenchRequest("A", "f" * 40, Path("/w"), Path("/o"), "production", 0, "M <= 64",
                       ("marlin_asym", "fp16_cache"), ("graph",))
    assert bench_command(req, python="py") == [
        "py", "-m", "harness", "bench", "--matrix", "production", "--filter", "M <= 64",
        "--paths", "marlin_asym,fp16_cache", "--mode", "graph", "--no-compare", "--out", "/o"]
    # settings for that bench alone (the machine factor's fewer samples)
    req = BenchRequest("A", "f" * 40, Path("/w"), Path("/o"), "production", 0,
                       settings=("min_samples=10",))
    assert bench_command(req, python="py")[-5:] == [
        "--set", "min_samples=10", "--no-compare", "--out", "/o"]


@pytest.fixture()
def repo(tmp_path):
    return speed_repo(tmp_path / "repo", "1.00", "1.05")


class FakeBench:
    """Writes synthetic results for the revision checked out in the worktree: marlin's
    speed factor comes from speed.txt, so the revisions really differ."""

    def __init__(self, first_rounds_samples: int = 40):
        self.calls: list[BenchRequest] = []
        self.n = first_rounds_samples
        self.base = make_rows(ms=(1, 16), seed=5)

    def __call__(self, req: BenchRequest) -> None:
        self.calls.append(req)
        assert git(req.worktree, "rev-parse", "HEAD") == req.revision
        factor = float((req.worktree / "speed.txt").read_text())
        n = 60 if req.out_dir.parent.name == "remeasure" else self.n
        rows = resample(self.base, seed=len(self.calls), factor={"marlin_asym": factor})
        rows = [replace(r, commit=req.revision) for r in rows]
        from harness.reports.stats import with_samples

        rows = [with_samples(r, r.samples()[:n]) for r in rows]
        env = Environment(arch="sm90", gpu_name="synthetic H200", commit=req.revision)
        write_run(req.out_dir / req.revision / "sm90", rows,
                  RunMeta(matrix="synthetic", commit=req.revision, arch="sm90", environment=env))


def test_compare_revisions_interleaves_and_cleans_up(repo, tmp_path):
    fake = FakeBench()
    out = compare("HEAD~1", "HEAD", S, work_dir=tmp_path / "cmp", repo=repo, matrix="synthetic",
                  rounds=4, runner=fake, echo=lambda s: None)
    rounds, confirm = fake.calls[:8], fake.calls[8:]
    assert [c.label for c in rounds] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert [c.round for c in rounds] == [0, 0, 1, 1, 2, 2, 3, 3]
    # the SLOWER rows are confirmed by one more interleaved A/B measurement of those rows
    assert [c.label for c in confirm] == ["A", "B"]
    assert all(c.out_dir.parent.name == "remeasure" for c in confirm)
    assert set(confirm[0].paths) == {"marlin_asym"}
    assert all(c.matrix == "synthetic" for c in fake.calls)
    assert len({c.worktree for c in fake.calls}) == 2
    assert not any(c.worktree.exists() for c in fake.calls)
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main checkout is left
    result = out.result
    assert {v.verdict for v in result.verdicts if v.path == "marlin_asym"} == {Verdict.SLOWER}
    assert all(v.remeasured for v in result.verdicts if v.path == "marlin_asym")
    assert {v.verdict for v in result.verdicts if v.path != "marlin_asym"} == {Verdict.SAME}
    assert all(r.n_samples == 4 * 40 for r in out.b_rows)  # four rounds pooled
    assert all(math.isfinite(v.margin) for v in result.verdicts)  # margins from the rounds
    assert result.exit_code == 1


def test_compare_remeasures_ambiguous_rows_interleaved(repo, tmp_path):
    fake = FakeBench(first_rounds_samples=2)  # too few samples for any test: moved rows AMBIGUOUS
    # without extra rounds (tests/unit/test_ab_extra_rounds.py has them): one remeasure round
    out = compare("HEAD~1", "HEAD", replace(S, ab_extra_rounds=0), work_dir=tmp_path / "cmp",
                  repo=repo, matrix="synthetic", rounds=2, runner=fake, echo=lambda s: None)
    extra = fake.calls[4:]
    assert [c.label for c in extra] == ["A", "B"]
    assert all(c.out_dir.parent.name == "remeasure" for c in extra)
    assert set(extra[0].paths) == {"marlin_asym"}
    marlin = [v for v in out.result.verdicts if v.path == "marlin_asym"]
    assert marlin and all(v.remeasured and v.verdict == Verdict.SLOWER for v in marlin)


def test_compare_stored_results_and_refusal(tmp_path):
    env = Environment(arch="sm90", gpu_name="synthetic H200", commit="a" * 40)
    base = make_rows(ms=(1, 16))
    write_run(tmp_path / "a", base, RunMeta(matrix="synthetic", environment=env))
    write_run(tmp_path / "b", resample(base, 3, factor={"fp16_cache": 0.9}),
              RunMeta(matrix="synthetic", environment=replace(env, commit="b" * 40)))
    write_run(tmp_path / "c", base,
              RunMeta(matrix="synthetic", environment=replace(env, gpu_name="RTX 4090")))
    out = compare(str(tmp_path / "a"), str(tmp_path / "b"), S, work_dir=tmp_path / "o",
                  repo=tmp_path)
    fp16 = [v for v in out.result.verdicts if v.path == "fp16_cache"]
    # 10% faster everywhere; where that made it its class's winner, WINNER_CHANGED says so
    assert {v.verdict for v in fp16} <= {Verdict.FASTER, Verdict.WINNER_CHANGED}
    assert all(v.time_change < -0.05 for v in fp16)
    assert out.result.exit_code == 0
    # another GPU model of the arch: judged on accuracy, timing rows not compared
    other = compare(str(tmp_path / "a"), str(tmp_path / "c"), S, work_dir=tmp_path / "o",
                    repo=tmp_path, echo=lambda s: None)
    assert {v.verdict for v in other.result.verdicts} == {Verdict.TIMING_NOT_COMPARABLE}
    with pytest.raises(ValueError, match="RTX 4090"):
        compare(str(tmp_path / "a"), str(tmp_path / "c"), S, work_dir=tmp_path / "o", repo=tmp_path,
                strict_env=True)
    with pytest.raises(CompareError, match="neither a result path nor a git revision"):
        compare(str(tmp_path / "a"), "no-such-rev", S, work_dir=tmp_path / "o", repo=tmp_path)


def test_subprocess_runner_uses_the_worktree_package(tmp_path):
    tree = tmp_path / "tree"
    (tree / "harness").mkdir(parents=True)
    (tree / "harness" / "__init__.py").write_text("")
    (tree / "harness" / "__main__.py").write_text(textwrap.dedent("""
        import json, sys, pathlib
        args = sys.argv[1:]
        if "--fail" in (pathlib.Path(__file__).parent / "mode").read_text():
            print("bench: error: no CUDA device", file=sys.stderr); sys.exit(3)
        out = pathlib.Path(args[args.index("--out") + 1]); out.mkdir(parents=True, exist_ok=True)
        (out / "argv.json").write_text(json.dumps(args))
        (out / "m.csv").write_text("x\\n")
    """))
    (tree / "harness" / "mode").write_text("ok")
    req = BenchRequest("A", "a" * 40, tree, tmp_path / "out" / "r0", "smoke", 0, None, (),
                       ("cold",))
    subprocess_runner(req)
    assert json.loads((req.out_dir / "argv.json").read_text()) == [
        "bench", "--matrix", "smoke", "--mode", "cold", "--plugin", str(DATA_PLUGIN),
        "--no-compare", "--out", str(req.out_dir)]
    (tree / "harness" / "mode").write_text("--fail")
    req2 = replace(req, out_dir=tmp_path / "out" / "r1")
    with pytest.raises(CompareError, match="exited 3: bench: error: no CUDA device"):
        subprocess_runner(req2)


@pytest.mark.slow     # ~6 s on 2 cores: every command of the CLI on stored runs
def test_cli_report_compare_and_baseline(tmp_path, capsys):
    from harness.cli import main

    env = Environment(arch="sm90", gpu_name="synthetic H200", torch="2.11.0", cuda="13.0",
                      commit="a" * 40)
    base = make_rows(ms=(1, 16))
    write_run(tmp_path / "r0", base, RunMeta(matrix="synthetic", environment=env))
    write_run(tmp_path / "r1", resample(base, 2, factor={"marlin_asym": 1.1}),
              RunMeta(matrix="synthetic", environment=env))
    for i in range(2):
        write_run(tmp_path / f"aa{i}", resample(base, 10 + i),
                  RunMeta(matrix="synthetic", environment=env))
    bl = str(tmp_path / "baselines")
    assert main(["baseline", "accept", str(tmp_path / "r0"), "--root", bl, "--yes"]) == 0
    assert main(["baseline", "calibrate", "--runs", str(tmp_path / "aa0"), str(tmp_path / "aa1"),
                 "--root", bl]) == 0
    assert main(["baseline", "show", "--root", bl]) == 0
    assert "2 runs" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "r0"), "--baseline", bl,
                 "--out", str(tmp_path / "rep0")]) == 0
    assert main(["report", str(tmp_path / "r1"), "--baseline", bl, "--out", str(tmp_path / "rep1"),
                 "--preset", "strict"]) == 1
    assert main(["report", str(tmp_path / "r1"), "--baseline", bl, "--out", str(tmp_path / "rep2"),
                 "--set", "min_effect=0.2"]) == 0
    md = (tmp_path / "rep1" / "report.md").read_text()
    assert "SLOWER" in md and "strict" in md
    assert main(["compare", str(tmp_path / "r0"), str(tmp_path / "r1"),
                 "--out", str(tmp_path / "cmp")]) == 1
    assert ({p.name for p in (tmp_path / "cmp").iterdir()}
            >= {"compare.csv", "compare.html", "compare.md"})
    capsys.readouterr()
    assert main(["report", str(tmp_path / "r1"), "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "m.csv").write_text(
        io.StringIO(",".join(column_names()) + "\n").getvalue()
        + ",".join(["x"] * len(column_names())) + "\n")
    assert main(["report", str(tmp_path / "broken" / "m.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "m.csv:2" in err and "schema_version" in err
    assert load_run(tmp_path / "baselines" / "sm90").rows  # the baseline dir reads as a run too
