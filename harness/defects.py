"""Test-only planted defects: deliberate bugs the harness must catch (issue 7).

Never use this module outside tests. Each ``PlantedDefect`` has a ``name``, a
``description``, where it can be caught (``on``: "cpu" and/or "gpu"), the check that
catches it (``caught_by``) and the gate verdict that shows it (``verdict``). ``plant()``
returns a context manager that plants the defect FROM OUTSIDE the code under test and
undoes it on exit, by one of:

* the test hooks of ``harness.kernels.marlin_asym`` (``planted_defect``: the Python
  ``TEST_DEFECT`` switches and the CUDA correction ``flags``: bit 0 fp16 accumulation,
  bit 1 skip the last 128-column tile, bit 2 do not regrow the scratch buffer; the flag
  defects pin the seed's ``two_kernel`` correction, whose kernels their descriptions name,
  while ``marlin_asym`` itself defaults to ``auto``);
* monkeypatching a function of ``harness.kernels.marlin_pack`` / ``dispatch`` for the
  duration (the packer, the per-row -1 translation);
* swapping a registered path for a ``WrappedPath`` that misbehaves (caches its output,
  is 5% slower, launches on a side stream), in ``PATHS`` or a given registry.

Extension point: a new defect is one ``PlantedDefect`` in ``DEFECTS`` and one test in
``tests/unit/test_planted_defects.py`` (CPU) or ``tests/gpu/test_planted_defects_gpu.py``.
``FaultPath`` injects the faults of the reliability tests (a raise, an out-of-memory, a
non-zero return code, NaN/Inf or unwritten output) on chosen calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch

from harness.defect_paths import (  # noqa: F401  (re-exported: the wrappers the tests plant)
    FAULTS,
    SLOWDOWN,
    CachedOutputPath,
    FaultPath,
    RacyOutputPath,
    SideStreamPath,
    SlowdownPath,
    WrappedPath,
)
from harness.kernels import dispatch, marlin_asym, marlin_pack
from harness.kernels.base import PATHS, GemmPath, PathRegistry

#: Bits of the CUDA correction's ``flags`` argument (csrc/harness_kernels.h).
FLAG_FP16_ACCUM, FLAG_SKIP_LAST_N_TILE, FLAG_NO_REGROW = 1, 2, 4


# ----------------------------------------------------------------------------- helpers
@contextmanager
def patched(module: Any, attr: str, value: Any) -> Iterator[None]:
    """``module.attr = value`` for the duration (restored even on error)."""
    saved = getattr(module, attr)
    setattr(module, attr, value)
    try:
        yield
    finally:
        setattr(module, attr, saved)


@contextmanager
def swapped_path(name: str, factory: Callable[[GemmPath], GemmPath],
                 registry: PathRegistry | None = None) -> Iterator[GemmPath]:
    """Replace path ``name`` of ``registry`` (default ``PATHS``) by ``factory(path)``.

    The registry has no public replace (paths register once), so the swap writes its
    name -> path table directly, and puts the original back on exit.
    """
    reg = registry if registry is not None else PATHS
    if reg is PATHS:
        from harness.kernels.registry_load import load_all
        load_all()
    inner = reg.get(name)
    wrapper = factory(inner)
    table = reg._paths                       # test-only swap, restored below
    table[name] = wrapper
    try:
        yield wrapper
    finally:
        table[name] = inner


# ----------------------------------------------------------------------------- plants
def _plant_packer_off_by_one(**_: Any):
    original = marlin_pack.pack_codes

    def shifted(codes: torch.Tensor) -> torch.Tensor:
        """Off by one 16x16 tile along N: tile (kt, j) holds the codes of tile (kt, j - 1)."""
        return original(torch.roll(codes, shifts=marlin_pack.TILE, dims=1))

    return patched(marlin_pack, "pack_codes", shifted)


@contextmanager
def _plant_untranslated(**_: Any) -> Iterator[None]:
    """Per-row weights reach Marlin with groupsize K, not -1 (TinyLoop's first bug).

    The path and the packer get the untranslated group size; the dispatcher model gets
    its own switch for this bug (``DispatchSettings.translate_per_row=False``).
    """
    original = marlin_pack.marlin_groupsize
    decide_for_case = dispatch.decide_for_case

    def untranslated(group_size: int, K: int, translate: bool = True) -> int:
        return original(group_size, K, translate=False)

    def decide_untranslated(case, device, settings=None):
        settings = replace(settings or dispatch.DispatchSettings(), translate_per_row=False)
        return decide_for_case(case, device, settings)

    with patched(marlin_pack, "marlin_groupsize", untranslated), \
            patched(dispatch, "decide_for_case", decide_untranslated):
        if hasattr(marlin_asym, "marlin_groupsize"):
            with patched(marlin_asym, "marlin_groupsize", untranslated):
                yield
        else:
            yield


def _plant_hook(defect: str | None = None, flags: int = 0, variant: str | None = None):
    def plant(**_: Any):
        return marlin_asym.planted_defect(defect, flags=flags, variant=variant)
    return plant


@contextmanager
def _plant_no_regrow(device: torch.device | None = None, **_: Any) -> Iterator[None]:
    """Start from the smallest scratch (4 KiB), then stop it from growing."""
    from harness.kernels.build import extension

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
        # only the seed's two_kernel correction has the scratch this flag stops growing
        with marlin_asym.planted_defect(None, flags=FLAG_NO_REGROW, variant="two_kernel"):
            yield
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

    @property
    def cpu(self) -> bool:
        return "cpu" in self.on

    def plant(self, *, path: str | None = None, registry: PathRegistry | None = None,
              device: torch.device | None = None):
        """A context manager planting the defect (``path``/``registry`` for path wrappers)."""
        return self.planter(path=path or self.default_path, registry=registry, device=device)


_BOTH, _GPU = ("cpu", "gpu"), ("gpu",)
DEFECTS: dict[str, PlantedDefect] = {d.name: d for d in (
    PlantedDefect("packer_off_by_one_tile",
                  "Marlin packer writes each 16x16 tile one tile along N (tile j holds j-1)",
                  _BOTH, "accuracy vs fp64 (NaN-poisoned output)", "WORSE_ACCURACY",
                  _plant_packer_off_by_one),
    PlantedDefect("delta_wrong_sign", "the correction adds -delta instead of +delta",
                  _BOTH, "accuracy vs fp64", "WORSE_ACCURACY", _plant_hook("delta_wrong_sign")),
    PlantedDefect("per_row_untranslated",
                  "per-row weights passed to Marlin as groupsize K instead of -1 (Marlin rc 2, "
                  "TinyLoop silently fell back)", _BOTH,
                  "dispatcher model (fallback_reason rc=2) and, on a GPU, the path's rc",
                  "LOST_DISPATCH", _plant_untranslated),
    PlantedDefect("correction_twice", "the asymmetric correction is applied two times",
                  _BOTH, "accuracy vs fp64", "WORSE_ACCURACY", _plant_hook("correction_twice")),
    PlantedDefect("scratch_not_regrown",
                  "a_sum scratch kept at its first (4 KiB) size: rows beyond it get no correction "
                  "after a larger M", _GPU, "accuracy vs fp64", "WORSE_ACCURACY", _plant_no_regrow),
    PlantedDefect("fp16_accumulation", "correction_accum accumulates in fp16 instead of fp32",
                  _GPU, "accuracy vs the baseline's row: rel_err and rms-ULP p99 growth (inside "
                  "the Marlin bound)", "LESS_ACCURATE",
                  _plant_hook(None, FLAG_FP16_ACCUM, "two_kernel")),
    PlantedDefect("last_n_tile_skipped", "correction_accum skips the last 128-column tile",
                  _GPU, "accuracy vs fp64", "WORSE_ACCURACY", _plant_hook(None, FLAG_SKIP_LAST_N_TILE, "two_kernel")),
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
