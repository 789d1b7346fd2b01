"""docs/architecture.md is a reference that works: its toy path, run exactly as the page
says (the code block as a ``--plugin`` file), shows up in a bench run and its report."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from harness.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def toy_block() -> str:
    """The python block right after the ``<!-- toy-path -->`` marker of the page."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- toy-path -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/architecture.md lost its toy-path block"
    return m.group(1)


def test_the_documented_toy_path_runs_and_is_reported(tmp_path, monkeypatch, capsys,
                                                        scratch_paths):
    from harness.cases import MATRICES
    monkeypatch.setattr(MATRICES, "_specs", dict(MATRICES._specs))
    plugin = tmp_path / "toy_path.py"
    plugin.write_text(toy_block(), encoding="utf-8")
    out = tmp_path / "results"
    assert main(["bench", "--cpu", "--matrix", "toy", "--plugin", str(plugin), "--out", str(out),
                 "--no-progress", "--no-compare", "--set", "max_case_seconds=0.2"]) == 0
    [run_dir] = list(out.glob("*/cpu"))
    assert main(["report", str(run_dir), "--out", str(tmp_path / "rep")]) == 0
    with open(tmp_path / "rep" / "report.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["path"] == "toy_fp32"]
    assert {r["case_id"] for r in rows} == {"M1-N256-K256-g128-s0", "M16-N256-K256-g128-s0"}
    assert all(r["verdict"] == "NEW" for r in rows)
    assert "toy_fp32" in (tmp_path / "rep" / "report.html").read_text()
    with open(run_dir / "toy.csv", newline="") as fh:
        toy = [r for r in csv.DictReader(fh) if r["path"] == "toy_fp32"]
    assert toy and all(r["status"] == "ok" and float(r["rel_err"]) < 1e-3 for r in toy)
