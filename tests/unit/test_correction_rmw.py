"""CPU tests of the ``rmw`` floor (Marlin + one kernel reading C and writing it back
unchanged: the floor of a correction that reads C after Marlin): its registry entry and
its agreement with the CUDA source, and the study report's rmw columns and summary lines
(``correction_report`` and ``scripts/correction_pick.py``) on a small synthetic study,
with and without rmw rows."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from harness.kernels import build
from harness.kernels.marlin import variants as cv
from harness.studies import correction_report as rep
from harness.studies import correction_study as study

CSRC = Path(cv.__file__).resolve().parents[1] / "csrc"
PICK = Path(__file__).resolve().parents[2] / "scripts" / "correction_pick.py"
PICKS = {"decode": {"variant": "stream"}, "mid": {"variant": "wide"},
         "large": {"variant": "wide"}}


# ------------------------------------------------------------------ registry and CUDA source
def test_rmw_is_floor_id_10():
    v = cv.VARIANTS["rmw"]
    assert (v.ext_id, v.kind) == (10, "floor") and cv.EXT_VARIANTS[10] == "rmw"
    assert cv.ext_id("rmw") == 10 and cv.EXT_IDS["rmw"] == 10
    assert cv.FLOORS == ("empty", "empty_pdl", "rmw")
    assert "rmw" in cv.STUDIED and "rmw" in cv.UNCORRECTED and "rmw" not in cv.CORRECTIONS
    assert cv.UNCORRECTED == ("marlin_only", "empty", "empty_pdl", "rmw")
    assert "rmw" not in cv.AUTO_BY_CLASS.values()
    assert "rmw" in study.parse_args(["--out", "x"]).variants     # studied by default


def test_rmw_in_the_cuda_enum_names_and_driver():
    header = (CSRC / "harness_kernels.h").read_text()
    enum = re.search(r"enum CorrectionVariant : int \{(.*?)\};", header, re.S).group(1)
    ids = dict(re.findall(r"(kVariant\w+) = (\d+)", enum))
    assert ids["kVariantRmw"] == "10" and ids["kVariantCount"] == "14"
    assert int(ids["kVariantCount"]) == len(cv.EXT_VARIANTS)
    src = (CSRC / "correction_variants.cu").read_text()
    names = re.search(r"names\[kVariantCount\] = \{(.*?)\};", src, re.S).group(1)
    assert re.findall(r'"(\w+)"', names)[10] == "rmw"
    case = re.search(r"case kVariantRmw: \{(.*?)\n    \}", src, re.S).group(1)
    assert "run_marlin(" in case and "launch_rmw(p, stream)" in case
    assert "(marlin_only, empty, empty_pdl, rmw)" in src       # no correction of its own
    assert "cudaError_t launch_rmw(const CorrectionProblem& p, cudaStream_t stream);" in (
        CSRC / "correction_variants.cuh").read_text()


def test_rmw_kernel_file_is_a_source_and_keeps_the_bits():
    assert "correction_variant_floor.cu" in {p.name for p in build.own_sources()}
    src = (CSRC / "correction_variant_floor.cu").read_text()
    assert "cudaError_t launch_rmw(const CorrectionProblem& p, cudaStream_t stream)" in src
    # stored = loaded XOR a mask passed as 0 at run time: the bits unchanged, not elided
    assert "0u);" in src and "v ^ m" in src
    assert "__ldg" not in src                  # C is written: no read-only-cache loads


# ------------------------------------------------------------------ the report
def _row(cid, M, variant, mode, pct=None, t_m=10.0, correct=True):
    r = {"case_id": cid, "M": M, "N": 2048, "K": 2048, "group_size": 128,
         "shape_class": cv.shape_class(M), "variant": variant, "mode": mode,
         "status": "ok" if correct else "incorrect", "marlin_us": t_m, "correct": correct}
    if pct is None:
        r["time_us"] = t_m
    else:
        r.update(time_us=t_m * (1 + pct / 100), overhead_us=t_m * pct / 100, overhead_pct=pct)
    return r


#: (case, M): {variant: (cold %, graph %)}: the picks (stream at decode, wide above), the
#: empty floor and the rmw floor
SPEC = {("M1-N2048", 1): {"stream": (20.0, 9.0), "empty": (6.0, 4.0), "rmw": (8.0, 5.0)},
        ("M64-N2048", 64): {"wide": (16.0, 10.0), "empty": (5.0, 3.0), "rmw": (9.0, 7.0)},
        ("M1024-N2048", 1024): {"wide": (12.0, 14.0), "empty": (2.0, 1.0), "rmw": (10.0, 9.0)}}


def _study(with_rmw=True):
    rows = []
    for (cid, M), per in SPEC.items():
        for i, mode in enumerate(("cold", "graph")):
            rows.append(_row(cid, M, "marlin_only", mode))
            rows += [_row(cid, M, v, mode, pcts[i]) for v, pcts in per.items()
                     if with_rmw or v != "rmw"]
    return rows


def test_floor_excess_adds_the_rmw_columns():
    ex = {(e["case_id"], e["mode"]): e for e in rep.floor_excess(_study(), PICKS)}
    e = ex[("M64-N2048", "graph")]
    assert (e["variant"], e["floor_pct"], e["excess_pp"]) == ("wide", 3.0, 7.0)
    assert (e["rmw_floor_pct"], e["excess_rmw_pp"]) == (7.0, 3.0)
    assert ex[("M1024-N2048", "cold")]["excess_rmw_pp"] == pytest.approx(2.0)
    old = rep.floor_excess(_study(with_rmw=False), PICKS)
    assert len(old) == 6
    assert all(e["rmw_floor_pct"] is None and e["excess_rmw_pp"] is None for e in old)
    assert [e["excess_pp"] for e in old] == [e["excess_pp"] for e in ex.values()]


def test_rmw_floor_median_and_max_over_the_empty_floor():
    f = rep.rmw_floor(_study())
    assert set(f) == {"cold", "graph"}
    g = f["graph"]                              # excess over empty: 1, 4, 8 pp
    assert (g["shapes"], g["median_pct"], g["max_pct"]) == (3, 7.0, 9.0)
    assert (g["median_excess_pp"], g["max_excess_pp"]) == (4.0, 8.0)
    assert g["max_excess_case"] == "M1024-N2048"
    assert f["cold"]["median_excess_pp"] == 4.0 and f["cold"]["median_pct"] == 9.0
    assert rep.rmw_floor(_study(with_rmw=False)) == {}
    assert rep.rmw_floor_lines(_study(with_rmw=False)) == []


def test_rmw_floor_lines_set_issue_21s_targets_against_the_floor():
    lines = {ln.split(",")[0]: ln for ln in rep.rmw_floor_lines(_study())}
    graph = lines["rmw floor (graph"]
    assert graph.startswith("rmw floor (graph, 3 shapes): overhead over Marlin alone median "
                            "7.0%, max 9.0%")
    assert "excess over Marlin + empty kernel median 4.0 pp, max 8.0 pp at M1024-N2048" in graph
    assert "issue 21's median <= 3 pp is BELOW it" in graph        # 4 pp floor
    assert "its max <= 6 pp BELOW it" in graph                      # 8 pp floor
    cold = lines["rmw floor (cold"]
    assert "issue 21's eager median <= 15% is above it" in cold      # 9% floor
    rows = [r for r in _study() if not (r["variant"] == "rmw" and r["case_id"] == "M1024-N2048")]
    graph = next(ln for ln in rep.rmw_floor_lines(rows) if "(graph" in ln)
    assert "median 2.5 pp, max 4.0 pp at M64-N2048" in graph       # M1: 1 pp, M64: 4 pp
    assert "median <= 3 pp is above it, its max <= 6 pp above it" in graph


def test_marlin_failures_counts_a_failing_rmw_as_marlins():
    rows = _study()
    for r in rows:
        if r["case_id"] == "M1-N2048" and r["variant"] == "rmw":
            r.update(correct=False, status="incorrect")
    assert rep.marlin_failures(rows, ["stream", "wide"]) == {"M1-N2048"}


def test_write_outputs_with_and_without_rmw(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    new.mkdir()
    old.mkdir()
    rep.write_outputs(new, _study(), {}, ["# t"])
    md = (new / "correction_study.md").read_text()
    assert ("| case | mode | variant | overhead % | floor % | excess (pp) | rmw floor % "
            "| excess over rmw (pp) |") in md
    assert "## The rmw floor: Marlin + C read and written back once" in md
    assert "- rmw floor (graph, 3 shapes)" in md
    js = json.loads((new / "correction_study.json").read_text())
    assert js["rmw_floor"]["graph"]["max_excess_pp"] == 8.0
    rep.write_outputs(old, _study(with_rmw=False), {}, ["# t"])
    md = (old / "correction_study.md").read_text()
    assert "| excess (pp) |\n" in md and "rmw" not in md
    assert json.loads((old / "correction_study.json").read_text())["rmw_floor"] == {}


# ------------------------------------------------------------------ scripts/correction_pick.py
@pytest.fixture(scope="module")
def pick():
    spec = importlib.util.spec_from_file_location("correction_pick", PICK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("with_rmw", [True, False], ids=["rmw", "no_rmw"])
def test_correction_pick_reports_the_rmw_floor(with_rmw, pick, tmp_path, capsys):
    rep.write_outputs(tmp_path, _study(with_rmw), {}, ["# t"])
    table = tmp_path / "pick.md"
    assert pick.main([str(tmp_path / "correction_study.csv"), "--picks",
                      "decode=stream,mid=wide,large=wide", "--markdown", str(table)]) == 0
    said = capsys.readouterr().out
    assert "FAIL: graph excess over Marlin + empty kernel <= 3 pp (median) (7.0 pp)" in said
    lines = table.read_text().splitlines()
    row = next(ln for ln in lines if ln.startswith("| M64-N2048 |"))
    if with_rmw:
        assert "rmw floor (graph, 3 shapes)" in said and "its max <= 6 pp BELOW it" in said
        assert lines[0].count("rmw floor %") == 2 and lines[0].count("excess over rmw pp") == 2
        assert lines[1].count("|---") == 14 and row.count("|") == 15
        assert row == ("| M64-N2048 | wide | 10.00 | 3.0 | 10.0 | +7.0 | 7.0 | +3.0 | "
                       "10.00 | 5.0 | 16.0 | +11.0 | 9.0 | +7.0 |")
    else:
        assert "rmw" not in said and "rmw" not in table.read_text()
        assert lines[1] == "|---" * 10 + "|" and row.count("|") == 11


def test_rmw_excess_lines_give_the_picks_distance_to_the_floor():
    lines = rep.rmw_excess_lines(_study(), PICKS, "the pick")
    # graph: stream 9 - 5 = 4 at M1, wide 10 - 7 = 3 at M64, 14 - 9 = 5 at M1024
    assert lines == ["the pick over the rmw floor (cold, 3 shapes): median 7.0 pp, max 12.0 pp "
                     "at M1-N2048",
                     "the pick over the rmw floor (graph, 3 shapes): median 4.0 pp, max 5.0 pp "
                     "at M1024-N2048"]
    assert rep.rmw_excess_lines(_study(with_rmw=False), PICKS, "the pick") == []
