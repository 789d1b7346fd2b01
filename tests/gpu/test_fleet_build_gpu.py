"""``harness build --arch all`` for real: every known arch compiled into a fresh
HARNESS_BUILD_DIR (no GPU of that arch needed), each ``.so`` holding SASS for exactly its
arch (``cuobjdump --list-elf``), Marlin in from sm_80 up and left out of sm_75 with the
reason, a second run finding every build cached, and, where a GPU is visible, the bench
loading the fleet build of its arch without compiling.

Needs a CUDA build of torch, nvcc, a C++ compiler, ninja and cuobjdump; skips, saying
which is missing, otherwise. Slow: about 30 s per arch.
    python -m pytest -v -m slow tests/gpu/test_fleet_build_gpu.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.archs import KNOWN_ARCHS
from harness.kernels.build_plan import MARLIN_ARCH_REASON

pytestmark = pytest.mark.slow
ARCHS = list(KNOWN_ARCHS)


def _cuobjdump() -> str | None:
    from torch.utils import cpp_extension  # CUDA_HOME: where the toolkit is

    home = Path(cpp_extension.CUDA_HOME or "", "bin", "cuobjdump")
    return str(home) if cpp_extension.CUDA_HOME and home.is_file() else shutil.which("cuobjdump")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Run ``harness build`` for every arch this nvcc can compile into a fresh build root;
    returns (root, {arch: plan}, {arch: why not built}, first stdout, second stdout)."""
    from harness.kernels import build

    if torch.version.cuda is None:
        pytest.skip(f"torch {torch.__version__} is a CPU build: the extension needs CUDA torch")
    missing = build.compiler_missing()
    if missing:
        pytest.skip(f"cannot compile here: {missing}")
    if _cuobjdump() is None:
        pytest.skip("cuobjdump not found (CUDA_HOME/bin or PATH): cannot inspect the SASS")
    root = tmp_path_factory.mktemp("fleet-build")
    skipped = {a: why for a in ARCHS if (why := build._nvcc_lacks(KNOWN_ARCHS[a]))}
    wanted = [a for a in ARCHS if a not in skipped]
    env = {**os.environ, "HARNESS_BUILD_DIR": str(root)}
    cmd = [sys.executable, "-m", "harness", "build", "--arch", ",".join(wanted)]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    plans = {a: build.plan_for(KNOWN_ARCHS[a]) for a in wanted}   # the plan has no root in it
    return root, plans, skipped, first.stdout, second.stdout


def _line(stdout: str, arch: str) -> str:
    [line] = [x for x in stdout.splitlines() if x.split()[:1] == [arch]]
    return line


@pytest.mark.parametrize("arch", ARCHS)
def test_each_arch_holds_its_own_sass(fleet, arch):
    root, plans, skipped, first, second = fleet
    if arch in skipped:
        pytest.skip(skipped[arch])
    plan = plans[arch]
    so = plan.directory(root) / f"{plan.name}.so"
    assert so.is_file(), first
    assert " built " in _line(first, arch) and plan.name in _line(first, arch)
    assert " cached " in _line(second, arch)                  # the second run compiles nothing
    listing = subprocess.run([_cuobjdump(), "--list-elf", str(so)], capture_output=True,
                             text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    sms = set(re.findall(r"\bsm_(\d+)\b", listing.stdout))
    assert sms == {KNOWN_ARCHS[arch].tag}, listing.stdout


@pytest.mark.parametrize("arch", ARCHS)
def test_marlin_is_in_from_sm80_and_out_of_sm75_with_the_reason(fleet, arch):
    root, plans, skipped, first, _ = fleet
    if arch in skipped:
        pytest.skip(skipped[arch])
    plan = plans[arch]
    meta = json.loads((plan.directory(root) / "build.json").read_text())
    assert meta["arch"] == KNOWN_ARCHS[arch].sm and meta["nvcc"]
    symbols = subprocess.run([_cuobjdump(), "--dump-elf-symbols",
                              str(plan.directory(root) / f"{plan.name}.so")],
                             capture_output=True, text=True, timeout=300).stdout
    if arch == "sm75":
        reason = MARLIN_ARCH_REASON.format(sm="sm_75")
        assert meta["with_marlin"] is False and meta["marlin_reason"] == reason
        assert f"without Marlin: {reason}" in _line(first, arch)
        assert "Marlin" not in symbols
    elif plan.marlin_source is None:
        assert meta["with_marlin"] is False and "quanto" in meta["marlin_reason"]
    else:
        assert meta["with_marlin"] is True and meta["marlin_reason"] is None
        assert "with Marlin" in _line(first, arch) and "Marlin" in symbols


def test_the_bench_loads_the_fleet_build_of_its_gpu_without_compiling(fleet, cuda_device):
    root, plans, _, _, _ = fleet
    arch = "sm{}{}".format(*torch.cuda.get_device_capability(cuda_device))
    if arch not in plans:
        pytest.skip(f"the visible GPU is {arch}, not one of the built archs")
    code = ("from harness.kernels.build import extension, build_info; extension(); "
            "import json, dataclasses; print(json.dumps(dataclasses.asdict(build_info())))")
    env = {**os.environ, "HARNESS_BUILD_DIR": str(root)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["cached"] is True and info["name"] == plans[arch].name
