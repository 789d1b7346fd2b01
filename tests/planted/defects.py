"""Planted defects: deliberate bugs the harness must catch (issue 7). Test code only.

Each ``PlantedDefect`` has a ``name``, a ``description``, where it can be caught (``on``:
"cpu" and/or "gpu"), the check that catches it (``caught_by``) and the gate verdict that
shows it (``verdict``). ``plant(path=, registry=, device=)`` returns a context manager that
puts a misbehaving path object in ``registry`` (default ``PATHS``) in the place of
``path`` and puts the original back on exit (on error too); it yields the planted path.
Nothing is switched inside the product: every defect is an object the test suite builds
(``planted.paths``):

* a ``MarlinAsymPath`` subclass with a bug of its own (packer off by one tile, -delta,
  the per-row groupsize not translated, the correction applied twice);
* ``MarlinAsymPath(variant="two_kernel", correction_flags=bit)``: the CUDA correction's
  ``flags`` argument (bit 0 fp16 accumulation, bit 1 skip the last 128-column tile, bit 2
  do not regrow the scratch buffer), pinned to the seed's ``two_kernel`` correction whose
  kernels their descriptions name (``marlin_asym`` itself defaults to ``auto``);
* a ``WrappedPath`` around the registered path (caches its output, varies between runs,
  is 5% slower, launches on a side stream).

A defect that shows in the dispatcher model also carries the ``DispatchSettings`` to run
with (``dispatch``: the untranslated per-row groupsize); a test passes it to
``RunContext(dispatch_settings=...)``.

Extension point: a new defect is one ``PlantedDefect`` in ``DEFECTS`` and one test in
``tests/unit/test_planted_defects.py`` (CPU) or ``tests/gpu/test_planted_defects_gpu.py``.
``FaultPath`` injects the faults of the reliability tests (a raise, an out-of-memory, a
non-zero return code, NaN/Inf or unwritten output) on chosen calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from harness.kernels.base import PATHS, GemmPath, PathRegistry
from harness.kernels.build import extension
from harness.kernels.dispatch import DispatchSettings
from harness.kernels.marlin.asym import CORRECTION_FLAG_BITS, MarlinAsymPath
from harness.kernels.registry_load import load_all

from .paths import (  # noqa: F401  (re-exported: the wrappers the tests plant)
    FAULTS,
    SLOWDOWN,
    CachedOutputPath,
    CorrectionTwicePath,
    FaultPath,
    OffByOneTilePackerPath,
    RacyOutputPath,
    SideStreamPath,
    SlowdownPath,
    UntranslatedPerRowPath,
    WrappedPath,
    WrongSignDeltaPath,
)

#: Bits of the CUDA correction's ``flags`` argument (csrc/harness_kernels.h).
FLAG_FP16_ACCUM = CORRECTION_FLAG_BITS["fp16_accumulation"]
FLAG_SKIP_LAST_N_TILE = CORRECTION_FLAG_BITS["skip_last_n_tile"]
FLAG_NO_REGROW = CORRECTION_FLAG_BITS["no_regrow"]


# ----------------------------------------------------------------------------- helpers
@contextmanager
def swapped_path(name: str, factory: Callable[[GemmPath], GemmPath],
                 registry: PathRegistry | None = None) -> Iterator[GemmPath]:
    """Replace path ``name`` of ``registry`` (default ``PATHS``) by ``factory(path)`` for
    the duration; the original goes back on exit (on error too)."""
    reg = registry if registry is not None else PATHS
    if reg is PATHS:
        load_all()
    inner = reg.get(name)
    planted = factory(inner)
    reg.replace(name, planted)
    try:
        yield planted
    finally:
        reg.replace(name, inner)


def _marlin(cls: type[MarlinAsymPath], **overrides: Any) -> Callable[[GemmPath], GemmPath]:
    """A factory: ``cls`` built like the path it replaces (its variant), with ``overrides``."""
    def make(inner: GemmPath) -> GemmPath:
        kw = {"variant": getattr(inner, "variant", None),
              "correction_flags": getattr(inner, "correction_flags", 0)}
        return cls(**{**kw, **overrides})
    return make


# ----------------------------------------------------------------------------- plants
def _plant_marlin(cls: type[MarlinAsymPath], **overrides: Any):
    def plant(path: str, registry: PathRegistry | None = None, **_: Any):
        return swapped_path(path, _marlin(cls, **overrides), registry)
    return plant


@contextmanager
def _plant_no_regrow(path: str, registry: PathRegistry | None = None,
                     device: torch.device | None = None, **_: Any) -> Iterator[GemmPath]:
    """Start from the smallest scratch (4 KiB), then stop it from growing (flag bit 2,
    which only the seed's two_kernel correction honours: the path is pinned to it)."""
    ext = extension()
    device = torch.device(device or "cuda")
    index = device.index if device.index is not None else torch.cuda.current_device()
    ext.scratch_free(index)
    with torch.cuda.device(index):
        one = torch.ones(1, 128, dtype=torch.float16, device=device)
        ext.apply_correction(one, torch.zeros(1, 128, dtype=torch.float16, device=device),
                             torch.zeros(1, 128, dtype=torch.float32, device=device))
        torch.cuda.synchronize(device)
    try:
        with swapped_path(path, _marlin(MarlinAsymPath, variant="two_kernel",
                                        correction_flags=FLAG_NO_REGROW), registry) as planted:
            yield planted
    finally:
        torch.cuda.synchronize(device)
        ext.scratch_free(index)


def _plant_wrapper(cls: type[WrappedPath]):
    def plant(path: str, registry: PathRegistry | None = None, **_: Any):
        return swapped_path(path, cls, registry)
    return plant


# ----------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class PlantedDefect:
    """One deliberate bug, how to plant it, and how the harness must catch it."""

    name: str
    description: str
    on: tuple[str, ...]             # where it is caught: ("cpu", "gpu") or ("gpu",)
    caught_by: str                  # the check that catches it
    verdict: str                    # the gate verdict the affected rows get
    planter: Callable[..., Any]
    default_path: str = "marlin_asym"   # the path whose rows show it
    dispatch: DispatchSettings | None = None   # run with these dispatcher settings (None: defaults)

    @property
    def cpu(self) -> bool:
        return "cpu" in self.on

    def plant(self, *, path: str | None = None, registry: PathRegistry | None = None,
              device: torch.device | None = None):
        """A context manager planting the defect in ``registry`` (default ``PATHS``) in the
        place of ``path`` (default ``default_path``); it yields the planted path."""
        return self.planter(path=path or self.default_path, registry=registry, device=device)


_BOTH, _GPU = ("cpu", "gpu"), ("gpu",)
DEFECTS: dict[str, PlantedDefect] = {d.name: d for d in (
    PlantedDefect("packer_off_by_one_tile",
                  "Marlin packer writes each 16x16 tile one tile along N (tile j holds j-1)",
                  _BOTH, "accuracy vs fp64 (NaN-poisoned output)", "WORSE_ACCURACY",
                  _plant_marlin(OffByOneTilePackerPath)),
    PlantedDefect("delta_wrong_sign", "the correction adds -delta instead of +delta",
                  _BOTH, "accuracy vs fp64", "WORSE_ACCURACY", _plant_marlin(WrongSignDeltaPath)),
    PlantedDefect("per_row_untranslated",
                  "per-row weights passed to Marlin as groupsize K instead of -1 (Marlin rc 2, "
                  "TinyLoop silently fell back)", _BOTH,
                  "dispatcher model (fallback_reason rc=2) and, on a GPU, the path's rc",
                  "LOST_DISPATCH", _plant_marlin(UntranslatedPerRowPath),
                  dispatch=DispatchSettings(translate_per_row=False)),
    PlantedDefect("correction_twice", "the asymmetric correction is applied two times",
                  _BOTH, "accuracy vs fp64", "WORSE_ACCURACY", _plant_marlin(CorrectionTwicePath)),
    PlantedDefect("scratch_not_regrown",
                  "a_sum scratch kept at its first (4 KiB) size: rows beyond it get no correction "
                  "after a larger M", _GPU, "accuracy vs fp64", "WORSE_ACCURACY", _plant_no_regrow),
    PlantedDefect("fp16_accumulation", "correction_accum accumulates in fp16 instead of fp32",
                  _GPU, "accuracy vs the baseline's row: rel_err and rms-ULP p99 growth (inside "
                  "the Marlin bound)", "LESS_ACCURATE",
                  _plant_marlin(MarlinAsymPath, variant="two_kernel",
                                correction_flags=FLAG_FP16_ACCUM)),
    PlantedDefect("last_n_tile_skipped", "correction_accum skips the last 128-column tile",
                  _GPU, "accuracy vs fp64", "WORSE_ACCURACY",
                  _plant_marlin(MarlinAsymPath, variant="two_kernel",
                                correction_flags=FLAG_SKIP_LAST_N_TILE)),
    PlantedDefect("cached_output", "the path returns the C of its first call whatever A is",
                  _BOTH, "re-check on fresh inputs after timing", "ERROR",
                  _plant_wrapper(CachedOutputPath)),
    PlantedDefect("racy_output", "one output element differs on every other call (a lost update)",
                  _BOTH, "outputs of accuracy_runs runs on identical inputs compared bit for bit",
                  "NONDETERMINISTIC", _plant_wrapper(RacyOutputPath), default_path="fp16_cache"),
    PlantedDefect("slowdown_5pct", "every call takes 5% longer (device spin on a GPU)",
                  _BOTH, "speed gate (Mann-Whitney + min_effect)", "SLOWER",
                  _plant_wrapper(SlowdownPath), default_path="fp16_cache"),
    PlantedDefect("side_stream", "the path runs on its own stream; the caller's never waits",
                  _GPU, "stream-escape check (cold), graph capture, the roofline floor", "ERROR",
                  _plant_wrapper(SideStreamPath)),
)}


def get(name: str) -> PlantedDefect:
    try:
        return DEFECTS[name]
    except KeyError:
        raise ValueError(f"defect: {name!r} is unknown; valid: {', '.join(DEFECTS)}") from None


def names(on: str | None = None) -> list[str]:
    """Defect names, all or those caught ``on`` "cpu" / "gpu"."""
    return [n for n, d in DEFECTS.items() if on is None or on in d.on]
