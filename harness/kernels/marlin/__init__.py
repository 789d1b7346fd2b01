"""Marlin: everything the harness does with Frantar's symmetric INT4 x FP16 kernel.

* ``facts``: pure facts about the kernel (no torch): its launcher's return codes and the
  shapes it has kernels for, the per-row -1 groupsize translation, its workspace, its
  numerics (split-K bound, the race at large M). The dispatcher model reads these.
* ``pack``: Marlin's weight layout (codes, permuted scales), the asymmetric pack with the
  correction's delta.
* ``providers``: where the symmetric kernel comes from (quanto compiled into the harness
  extension, or upstream's package) and what each one computes.
* ``variants``: the correction variants of ``marlin_asym`` (names, selection, ``auto``).
* ``asym``: path ``marlin_asym``, Marlin + TinyLoop's asymmetric zero-point correction.
* ``fused_zero``: peer ``marlin_fused_zero``, quanto's Marlin with its fused zero point.

Imports go one way: facts <- pack <- providers <- asym / fused_zero, variants <- asym.
This ``__init__`` imports nothing, so ``harness.kernels.dispatch`` can read ``facts``
without loading a path module.
"""
