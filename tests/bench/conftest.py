"""pytest-benchmark integration: which matrix/paths/modes to run, and machine_info.

Choose with options (when ``pytest tests/bench`` loads this conftest at startup) or the
equivalent environment variables:
  --bench-matrix / HARNESS_BENCH_MATRIX   matrix name (default smoke)
  --bench-filter / HARNESS_BENCH_FILTER   case filter expression
  --bench-paths  / HARNESS_BENCH_PATHS    comma list of paths (default all)
  --bench-modes  / HARNESS_BENCH_MODES    comma list: cold,graph (GPU default) or cpu
  --bench-cpu    / HARNESS_BENCH_CPU=1    use the CPU even if a GPU is visible
  --bench-seconds/ HARNESS_BENCH_SECONDS  device-time budget per test for rounds (default 0.5)
"""

from __future__ import annotations

import os

import pytest
import torch

_OPTIONS = {
    "bench_matrix": ("--bench-matrix", "HARNESS_BENCH_MATRIX", "smoke"),
    "bench_filter": ("--bench-filter", "HARNESS_BENCH_FILTER", ""),
    "bench_paths": ("--bench-paths", "HARNESS_BENCH_PATHS", ""),
    "bench_modes": ("--bench-modes", "HARNESS_BENCH_MODES", ""),
    "bench_seconds": ("--bench-seconds", "HARNESS_BENCH_SECONDS", "0.5"),
}


def pytest_addoption(parser):
    group = parser.getgroup("harness-bench", "INT4 GEMM harness benchmark cases")
    for dest, (flag, env, default) in _OPTIONS.items():
        group.addoption(flag, dest=dest, default=None,
                        help=f"(env {env}; default {default or 'all'})")
    group.addoption("--bench-cpu", dest="bench_cpu", action="store_true", default=None,
                    help="time the CPU paths even when a GPU is visible (env HARNESS_BENCH_CPU=1)")


def bench_option(config, dest: str) -> str:
    """Command-line option, else environment variable, else default (conftest may load late)."""
    flag, env, default = _OPTIONS[dest]
    value = config.getoption(dest, default=None)
    return str(value if value is not None else os.environ.get(env, default))


def bench_device(config) -> torch.device:
    cpu = config.getoption("bench_cpu", default=None) or os.environ.get("HARNESS_BENCH_CPU") == "1"
    if cpu or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def bench_modes(config, device: torch.device) -> list[str]:
    modes = [m for m in bench_option(config, "bench_modes").split(",") if m]
    return modes or (["cpu"] if device.type == "cpu" else ["cold", "graph"])


def pytest_generate_tests(metafunc):
    if not {"bench_case", "path_name", "mode"} <= set(metafunc.fixturenames):
        return
    from harness.cases import MATRICES
    from harness.kernels.base import PATHS
    from harness.kernels.registry_load import load_all

    load_all()
    config = metafunc.config
    cases = MATRICES.cases(bench_option(config, "bench_matrix"),
                           bench_option(config, "bench_filter") or None)
    paths = [p for p in bench_option(config, "bench_paths").split(",") if p] or PATHS.names()
    for p in paths:
        PATHS.get(p)
    device = bench_device(config)
    metafunc.parametrize("bench_case", cases, ids=[c.id for c in cases])
    metafunc.parametrize("path_name", paths)
    metafunc.parametrize("mode", bench_modes(config, device))


@pytest.fixture(scope="session")
def device(pytestconfig) -> torch.device:
    d = bench_device(pytestconfig)
    if d.type == "cpu":
        torch.set_num_threads(1)       # stable on a shared 2-core runner (see harness bench)
    return d


@pytest.fixture(scope="session")
def bench_seconds(pytestconfig) -> float:
    return float(bench_option(pytestconfig, "bench_seconds"))


def pytest_benchmark_update_machine_info(config, machine_info):
    """GPU name, CC, driver, CUDA, torch, quanto version and the git commit."""
    from harness.measure.envinfo import environment

    env = environment(bench_device(config))
    keys = ("arch", "gpu_name", "compute_capability", "driver", "cuda", "torch", "quanto",
            "commit", "python", "host", "l2_cache_bytes", "sm_count", "notes")
    machine_info.update({k: env.get(k) for k in keys if k in env})
