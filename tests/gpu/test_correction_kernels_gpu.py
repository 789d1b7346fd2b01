"""`harness study kernels` on a GPU (marker ``gpu``; skips without a GPU or a build): every
kernel of every variant appears in the profile with a finite time and a floor, and the
CSV holds them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.cli import main

pytestmark = pytest.mark.gpu


def test_every_correction_kernel_is_profiled_beside_its_floor(ext, gpu_out_dir, capsys):
    out = gpu_out_dir / "correction_kernels.csv"
    assert main(["study", "kernels", "--filter", "(M == 1 or M == 1024) and N == 2048 "
                 "and K == 2048", "--reps", "10", "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert set(frame["kernel"]) == {"a_group_sum", "correction_accum", "asum", "corr_tile",
                                    "corr_tile+sum", "asum_flat", "corr_stream", "corr_wide",
                                    "corr_decode"}
    assert set(frame["M"]) == {1, 1024} and (frame["samples"] == 10).all()
    for r in frame.itertuples():
        assert math.isfinite(r.time_us) and r.time_us > 0 and r.floor_us > 0, r
        assert r.floor_us == max(r.bw_floor_us, r.empty_us)
        # the copy of the same bytes: measured, and slower than the empty kernel
        assert math.isfinite(r.copy_us) and r.copy_us > r.empty_us, r
        assert r.copy_ratio == pytest.approx(r.time_us / max(r.floor_us, r.copy_us))
    said = capsys.readouterr().out
    assert "empty kernel" in said and "within 1.5x floor" in said
