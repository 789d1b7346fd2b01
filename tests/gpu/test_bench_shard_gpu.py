"""``harness bench --gpus`` on the GPUs there are: two workers sharing one GPU (the single
H200 acceptance of the sharding: rows and schema as one worker's; timings not compared),
and, on a host of several GPUs, one worker per GPU. Real ``harness bench`` processes."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PART = ["--matrix", "production", "--filter", "M <= 16 and N == 2048", "--mode", "graph",
        "--paths", "fp16_cache,marlin_asym", "--no-progress", "--no-compare"]


def _bench(out: Path, *args: str) -> list[dict]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    done = subprocess.run([sys.executable, "-m", "harness", "bench", "--out", str(out), *PART,
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [path] = out.glob("*/*/production.csv")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_two_workers_on_one_gpu_give_one_workers_rows(cuda_device, tmp_path):
    one = _bench(tmp_path / "one")
    two = _bench(tmp_path / "two", "--gpus", "0,0")
    assert list(one[0]) == list(two[0])
    assert [(r["case_id"], r["path"], r["mode"]) for r in one] == \
        [(r["case_id"], r["path"], r["mode"]) for r in two]
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    assert {(r["gpu_index"], r["gpu_uuid"]) for r in one} == {("0", uuid)}
    assert {(r["gpu_index"], r["gpu_uuid"]) for r in two} == {("0", uuid)}
    assert [r["status"] for r in one] == [r["status"] for r in two]


def test_one_worker_per_gpu_names_each_gpu(cuda_device, tmp_path):
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"needs a host of several GPUs ({count} visible)")
    rows = _bench(tmp_path, "--gpus", "all")
    uuids = {str(torch.cuda.get_device_properties(i).uuid): str(i) for i in range(count)}
    assert all(uuids.get(r["gpu_uuid"]) == r["gpu_index"] for r in rows)
    assert len({r["gpu_uuid"] for r in rows}) == min(count, len({r["case_id"] for r in rows}))
