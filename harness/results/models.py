"""GPU models inside an arch: which baseline a run is gated against, where a model's goes.

An arch is a family of GPU models (sm89: L4, L40, L40S, RTX 4090, RTX 6000 Ada; sm90:
H100 PCIe/SXM/NVL, H200). ``baselines/<arch>/`` holds the arch's **reference model**
(the model its rows were recorded on, named in each ``<matrix>.json``'s environment);
rows of any other model of the arch live beside them, one folder per model:

    baselines/sm90/production.csv             reference model (e.g. NVIDIA H200)
    baselines/sm90/models/nvidia-h100-80gb-hbm3/production.csv   another model's own

Each model folder is a baseline directory like the arch's (CSV + json per matrix, its own
environment, margins and provenance), written by ``harness baseline accept`` /
``record`` from runs of that model (``target_dir``). A gate reads, per matrix, the
runner's own model's folder when it holds that matrix, else the arch's reference
(``matrix_dir``, ``load_for_model``): same model, the usual timing gate; another model,
speed judged on the runner (``reports.projection``, the job's A/B). CPU runs have no
models (their timings are information).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from .baseline import Baseline, baseline_dir, load_baseline

#: The folder under ``baselines/<arch>/`` that holds the other models' baselines.
MODELS_DIR = "models"


def model_slug(gpu_name: str) -> str:
    """A folder name for a GPU model: lower case, runs of other characters as one '-'
    (``'NVIDIA H100 80GB HBM3'`` -> ``'nvidia-h100-80gb-hbm3'``); "" for no name."""
    return re.sub(r"[^a-z0-9]+", "-", (gpu_name or "").lower()).strip("-")


def _has_models(arch: str, gpu_name: str) -> bool:
    return bool(model_slug(gpu_name)) and arch != "cpu" and model_slug(gpu_name) != "cpu"


def model_dir(arch_dir: str | Path, gpu_name: str) -> Path:
    """``<arch_dir>/models/<slug>``: where ``gpu_name``'s own baseline lives."""
    return Path(arch_dir) / MODELS_DIR / model_slug(gpu_name)


def reference_model(arch_dir: str | Path, matrix: str | None = None) -> str:
    """The GPU model the arch's own baseline (of ``matrix``; of any matrix when None or
    when that matrix has none) was recorded on; "" when there is none or it does not say."""
    arch_dir = Path(arch_dir)
    names = [arch_dir / f"{matrix}.json"] if matrix else []
    names += sorted(arch_dir.glob("*.json"))
    for path in names:
        try:
            env = json.loads(path.read_text(encoding="utf-8")).get("environment") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(env, dict) and env.get("gpu_name"):
            return str(env["gpu_name"])
    return ""


def same_model(a: str, b: str) -> bool:
    """Two GPU names of one model (case and spacing aside)."""
    return model_slug(a) == model_slug(b)


def matrix_dir(root: str | Path, arch: str, gpu_name: str, matrix: str) -> Path:
    """The baseline directory a run on ``gpu_name`` is gated against for ``matrix``: its
    model's folder when it holds the matrix, else the arch's (``baseline_dir``)."""
    adir = baseline_dir(root, arch)
    if _has_models(arch, gpu_name):
        mdir = model_dir(adir, gpu_name)
        if (mdir / f"{matrix}.csv").is_file():
            return mdir
    return adir


def has_matrix(root: str | Path, arch: str, gpu_name: str, matrix: str) -> bool:
    """Whether any baseline (the model's or the arch's reference) holds ``matrix``."""
    return (matrix_dir(root, arch, gpu_name, matrix) / f"{matrix}.csv").is_file()


def load_for_model(root: str | Path, arch: str, gpu_name: str | Callable[[str], str],
                   matrices: Sequence[str]) -> Baseline:
    """The baseline of ``matrices`` a run on ``gpu_name`` is gated against, each matrix from
    its own ``matrix_dir`` (a model may have production of its own and still use the
    reference's ppl); ``gpu_name`` may be a function of the matrix (a stored run whose
    matrices were measured apart); ``directory`` is the first matrix's."""
    model = gpu_name if callable(gpu_name) else (lambda _m: gpu_name)
    parts = [load_baseline(matrix_dir(root, arch, model(m), m), [m]) for m in matrices]
    if len(parts) == 1:
        return parts[0]
    rows = tuple(r for p in parts for r in p.rows)
    metas = {k: v for p in parts for k, v in p.metas.items()}
    return Baseline(parts[0].directory, rows, metas)


def target_dir(root: str | Path, arch: str, gpu_name: str, *, reference: bool = False) -> Path:
    """Where ``harness baseline accept/record`` writes a run measured on ``gpu_name``: the
    arch's folder when it holds no baseline yet, when its baseline is of this model, or
    with ``reference`` (the run becomes the arch's reference model); else the model's own
    folder (an H100 run never replaces the H200 rows of sm90)."""
    adir = Path(root) / arch
    if reference or not _has_models(arch, gpu_name):
        return adir
    ref = reference_model(adir)
    if not ref or same_model(ref, gpu_name):
        return adir
    return model_dir(adir, gpu_name)


def models_of(arch_dir: str | Path) -> dict[str, Path]:
    """The other models with a baseline folder under ``arch_dir``: slug -> folder."""
    base = Path(arch_dir) / MODELS_DIR
    if not base.is_dir():
        return {}
    return {d.name: d for d in sorted(base.iterdir()) if d.is_dir() and any(d.glob("*.csv"))}
