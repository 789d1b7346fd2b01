"""The measuring session's re-measurement hook (what the gate calls for AMBIGUOUS rows)."""

from __future__ import annotations

import torch

from harness.cases import MATRICES
from harness.config import load_settings
from harness.kernels.base import PATHS
from harness.kernels.registry_load import load_all
from harness.measure.session import BenchSession, _source_path

FAST = {"warmup_ms": 1, "max_case_seconds": 0.03, "min_samples": 3, "max_samples": 20,
        "target_rel_spread": 0.05, "accuracy_runs": 1}


def _pair_case():
    return next(c for c in MATRICES.cases("smoke") if c.kind != "gemm")


def test_a_derived_pair_path_is_measured_through_its_registered_path():
    load_all()
    case = _pair_case()
    assert _source_path(PATHS, case, "native_int4_fused") == "native_int4"
    assert _source_path(PATHS, case, "fp16_cache") == "fp16_cache"
    assert _source_path(PATHS, case, "no_such_path") == "no_such_path"


def test_remeasure_returns_exactly_the_keys_asked_for(tmp_path):
    load_all()
    case = _pair_case()
    session = BenchSession(device=torch.device("cpu"), arch="cpu",
                           settings=load_settings(overrides=FAST), modes=("cpu",),
                           paths=["native_int4"], out=tmp_path, progress=False, table=False,
                           echo=lambda s: None)
    session.cases["smoke"] = [case]
    keys = [(case.id, "native_int4_fused", "cpu"), (case.id, "native_int4", "cpu")]
    rows = session.remeasure_hook("smoke")(keys)
    assert sorted(r.key for r in rows) == sorted(keys)
    assert all(r.status == "ok" for r in rows), [r.error for r in rows]
