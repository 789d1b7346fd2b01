"""docs/plugins.md works as written: its weight-format block runs, its pyproject block
names the entry point group the harness reads (as the example package does), and every
command of its command block is one the harness's parser accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from harness.cli import build_parser
from harness.config import _toml as tomllib
from harness.kernels.registry_load import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "plugins.md"


def block(marker: str, lang: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"<!-- {marker} -->\s*```{lang}\n(.*?)```", text, re.S)
    assert m, f"docs/plugins.md lost its {marker} block"
    return m.group(1)


def test_the_weight_format_block_runs():
    exec(compile(block("plugins-weight", "python"), str(DOC), "exec"), {})


def test_the_entry_point_group_is_the_one_the_harness_reads():
    doc = tomllib.loads(block("plugins-pyproject", "toml"))
    assert list(doc["project"]["entry-points"]) == [ENTRY_POINT_GROUP]
    example = tomllib.loads((ROOT / "examples" / "plugins" / "pyproject.toml").read_text())
    eps = example["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert eps == {"int4_example": "int4_example.paths:register"}


def test_every_documented_command_parses():
    parser = build_parser()
    lines = [ln.split("#")[0].strip() for ln in block("plugins-commands", "bash").splitlines()]
    commands = [shlex.split(ln)[1:] for ln in lines if ln.startswith("harness ")]
    assert len(commands) == 5
    for argv in commands:
        parser.parse_args(argv)            # argparse exits (SystemExit) on an unknown flag
