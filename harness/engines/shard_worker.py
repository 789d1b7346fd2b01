"""The worker side of ``harness bench --gpus`` (``harness.engines.bench_shard``).

Each worker is one spawned process: ``init_worker`` (its executor's initializer) pins its
device with CUDA_VISIBLE_DEVICES before anything imports torch, then the first task builds
the worker's ``BenchSession`` (torch, the paths, the ``--plugin`` files, the environment and
this device's ceilings) and every task after it uses that session: ``hello`` (what the
device is), ``measure`` (one case, rows returned to the parent, which writes them),
``lost`` (the error rows of a case lost twice), ``remeasure`` (the gate's keys again).
Torch-free at import, which is what lets the initializer run first.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..results.schema import ResultRow
from .plugins import load_plugins

#: set in each worker to its device's host index (a plugin may read it)
WORKER_ENV = "HARNESS_WORKER_DEVICE"


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker needs: its slot in ``--gpus``, its device's host index, and the
    run's options (settings, modes, paths, plugins, CPU threads)."""

    slot: int
    device: int
    cpu: bool
    settings: object
    modes: tuple[str, ...]
    paths: tuple[str, ...]
    plugins: tuple[str, ...]
    cpu_threads: int
    extra: dict


@dataclass(frozen=True)
class CaseResult:
    """One case measured by one worker: its rows, row notes and wall time by stage."""

    case_id: str
    rows: tuple[ResultRow, ...]
    notes: dict
    wall: dict


# ------------------------------------------------------------------------- the worker side
_SPEC: WorkerSpec | None = None
_SESSION = None


def init_worker(spec: WorkerSpec) -> None:
    """The worker's initializer: pin the device before anything imports torch."""
    global _SPEC
    if "torch" in sys.modules:
        raise RuntimeError("shard worker: torch was imported before the device was pinned")
    if not spec.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(spec.device)
    os.environ[WORKER_ENV] = str(spec.device)
    _SPEC = spec


def worker_session():
    """The worker's measuring session (built on first use: torch, paths, plugins, the
    environment and this device's ceilings)."""
    global _SESSION
    if _SESSION is None:
        import torch  # only here: the initializer has pinned the device first

        from harness.kernels import registry_load  # torch (the paths), after the pinning
        from harness.measure import envinfo, session  # torch (the engine), after the pinning
        spec = _SPEC
        if spec.cpu:
            device = torch.device("cpu")
            torch.set_num_threads(max(1, spec.cpu_threads))
        else:
            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
        load_plugins(list(spec.plugins), registry_load.load_all)
        _SESSION = session.BenchSession(
            device=device, arch=envinfo.arch_label(device), settings=spec.settings,
            modes=spec.modes, paths=list(spec.paths), out=Path("."), progress=False,
            table=False, extra=dict(spec.extra), echo=_quiet, host_index=spec.device,
            stand_in=spec.cpu)
    return _SESSION


def _quiet(*args, **kwargs) -> None:
    """A worker prints nothing of its own; the parent reports."""


def hello() -> dict:
    """Start the session; what the device is (index, uuid, name, environment, ceilings)."""
    s = worker_session()
    return {"slot": _SPEC.slot, "gpu_index": s.gpu_index, "gpu_uuid": s.gpu_uuid,
            "gpu_name": s.env.get("gpu_name") or "cpu", "arch": s.arch, "pid": os.getpid(),
            "env": dict(s.env), "ceilings": s.ceilings.numbers(),
            "ceilings_detail": s.ceilings.to_dict()}


def measure_case(matrix: str, case, skip: frozenset) -> CaseResult:
    """Measure ``case`` through the run's paths and modes, leaving out the keys in ``skip``
    (done by an earlier, interrupted run); nothing is written here."""
    s = worker_session()
    ctx = s.context(matrix)
    runner = s.runner(ctx, skip)
    rows = runner.run([case], list(_SPEC.paths))
    return CaseResult(case.id, tuple(rows), dict(ctx.notes), dict(runner.wall))


def lost_rows(matrix: str, case, skip: frozenset, reason: str, device: tuple[int, str]) -> list:
    """The ``error`` rows of a case lost twice, naming ``device`` (index, uuid) where it was
    lost last."""
    s = worker_session()
    rows = s.runner(s.context(matrix), skip).error_rows(case, list(_SPEC.paths), reason)
    return [replace(r, gpu_index=device[0], gpu_uuid=device[1]) for r in rows]


def remeasure_keys(matrix: str, cases: list, keys: list) -> list:
    """The gate's ``remeasure``: ``keys`` of ``matrix`` (whose cases are ``cases``) again."""
    s = worker_session()
    s.cases[matrix] = list(cases)
    return s.remeasure_hook(matrix)(keys)
