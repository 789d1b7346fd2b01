"""Committed baselines stand alone: they name their runs by commit, GPU and date, never by
a path on the machine that made them, and they load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results.baseline import load_baseline

ROOT = Path(__file__).resolve().parents[2] / "baselines"


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


@pytest.mark.parametrize("path", sorted(ROOT.glob("*/*.json")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_baseline_json_holds_no_machine_path(path):
    bad = [s for s in _strings(json.loads(path.read_text())) if s.startswith("/")
           or "/tmp/" in s or "/work/" in s or "/home/" in s]
    assert not bad, f"{path}: machine paths {bad[:3]}"


@pytest.mark.parametrize("arch", sorted(p.name for p in ROOT.iterdir() if p.is_dir()))
def test_every_committed_baseline_loads_with_its_environment(arch):
    base = load_baseline(ROOT / arch)
    assert base.rows and not base.environment.is_empty
