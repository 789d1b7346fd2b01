"""harness.studies.gate_study_report on synthetic verdicts (torch-free)."""

import math

import pytest

from harness.studies.gate_study_report import read_verdicts, render, summarize, write_verdicts


def _row(rep, kind, path, case, verdict, fails, base, cur, planted="", aa=None, expected=None):
    return {"rep": rep, "kind": kind, "planted_path": planted, "case_id": case, "M": 1,
            "path": path, "mode": "graph", "verdict": verdict, "fails": fails,
            "remeasured": False, "base_us": base, "cur_us": cur, "change": cur / base - 1,
            "p_value": 0.001, "threshold": 0.03, "margin": 0.01, "aa_us": aa,
            "expected_slowdown": expected, "first": "", "reason": "r"}


def _study():
    rows = []
    for rep in (1, 2, 3):
        rows.append(_row(rep, "aa", "fp16_cache", "c1", "SAME", False, 10.0, 10.05))
        rows.append(_row(rep, "aa", "native_int4", "c2", "SAME", False, 100.0, 100.5))
        # rep 3's A/A has a false SLOWER on native_int4
        if rep == 3:
            rows[-1] = _row(rep, "aa", "native_int4", "c2", "SLOWER", True, 100.0, 106.0)
        hit = rep != 2                              # the planted run of rep 2 is missed
        rows.append(_row(rep, "planted", "fp16_cache", "c1", "SLOWER" if hit else "SAME", hit, 10.0,
                         10.5, planted="fp16_cache", aa=10.0, expected=0.05))
    return rows


def test_counts_false_slower_and_caught_runs(tmp_path):
    path = write_verdicts(tmp_path / "v.csv", _study())
    s = summarize(read_verdicts(path))
    assert s["aa"]["reps"] == 3 and s["aa"]["rows_per_rep"] == 2
    assert s["aa"]["false_slower_rows"] == 1 and s["aa"]["runs_with_false_slower"] == 1
    p = s["planted"]["fp16_cache"]
    assert (p["runs_caught"], p["reps"], p["rows_caught"], p["rows"]) == (2, 3, 2, 3)
    assert p["achieved"]["median"] == pytest.approx(0.05)
    assert p["missed_cases"][0]["case_id"] == "c1" and p["missed_cases"][0]["caught"] == 2
    # |delta| split at 20 us: c1 (10 us) below, c2 (100 us) above
    assert s["aa"]["delta_lt_20us"]["n"] == 3
    assert s["aa"]["delta_ge_20us"]["max"] == pytest.approx(0.06)
    md = render(s, {"command": "x", "reps_done": 3})
    assert "2 / 3" in md and "false SLOWER" in md


def test_informational_eager_slower_is_not_a_false_slower():
    rows = [_row(1, "aa", "fp16_cache", "c1", "SLOWER", False, 10.0, 12.0),
            {**_row(1, "aa", "fp16_cache", "c2", "SAME", False, 10.0, 10.1),
             "first": "SLOWER +3.70%", "remeasured": True}]
    s = summarize(rows)
    assert s["aa"]["first_slower_cleared"] == 1 and s["aa"]["remeasured_rows"] == 1
    assert s["aa"]["false_slower_rows"] == 0 and s["aa"]["informational_slower"] == 1
    assert math.isnan(s["aa"]["delta_ge_20us"]["median"])


def test_missing_column_is_named(tmp_path):
    f = tmp_path / "v.csv"
    f.write_text("rep,kind\n1,aa\n")
    with pytest.raises(ValueError, match="missing column"):
        read_verdicts(f)
