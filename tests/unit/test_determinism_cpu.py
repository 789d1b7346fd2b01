"""``harness study determinism`` on the CPU: a stable path has one output, a
path that varies is counted and located, and bad arguments are one-line errors."""

from __future__ import annotations

import csv

import pytest
import torch

from harness.cases.case import GemmCase
from harness.kernels.base import GemmPath, Prepared
from harness.studies.determinism import main, measure

CASE = GemmCase(M=128, N=256, K=256, group_size=128, seed=5)


class Varies(GemmPath):
    """Exact, except that every second run adds 1.0 to output rows 64..127, columns 0..63."""
    name, description = "varies", "fake"

    def unavailable_reason(self, device):
        return None

    def prepare(self, weight, device):
        return Prepared(self.name, weight, device,
                        state={"W": weight.dequantize(torch.float64).float(), "n": 0})

    def run(self, prepared, A, out):
        out.copy_(A.float() @ prepared.state["W"])
        prepared.state["n"] += 1
        if prepared.state["n"] % 2 == 0:
            out[64:128, 0:64] += 1.0
        return out


def test_a_varying_path_is_counted_and_located():
    d = measure(CASE, Varies(), torch.device("cpu"), runs=4)
    assert (d.runs, d.distinct_outputs) == (4, 2)
    assert d.diff_rows == 64 and d.diff_col_tiles == 1
    assert d.diff_frac == pytest.approx(64 * 64 / (128 * 256))
    assert d.rel_fro_max > 10 * d.rel_fro_min and d.max_ulp_between > 0
    with pytest.raises(ValueError, match="at least 2"):
        measure(CASE, Varies(), torch.device("cpu"), runs=1)


def test_the_command_writes_one_row_per_case_and_path(tmp_path, capsys):
    out = tmp_path / "det.csv"
    assert main(["--matrix", "smoke", "--filter", "M <= 4", "--paths", "native_int4",
                 "--runs", "2", "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["path"] == "native_int4" and r["distinct_outputs"] == "1" for r in rows)
    assert all(int(r["diff_rows"]) == 0 for r in rows)


@pytest.mark.parametrize("argv, needle", [
    (["--paths", "nope"], "unknown path 'nope'"),
    (["--filter", "Q > 3"], "unknown field 'Q'"),
    (["--runs", "1"], "--runs: need at least 2"),
])
def test_bad_arguments_are_one_line_errors(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--matrix", "smoke", *argv])
    assert exc.value.code == 2 and needle in capsys.readouterr().err
