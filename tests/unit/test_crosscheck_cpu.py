"""crosscheck's trace reading on a synthetic chrome trace (no GPU needed)."""

import json

import pytest

from harness.measure.crosscheck import device_activity, device_time_us, per_name_us


def test_device_activity_sums_by_name(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "void marlin::Marlin<256, 1>(int4 const*)", "dur": 20.0},
        {"ph": "X", "cat": "kernel", "name": "void marlin::Marlin<256, 1>(int4 const*)", "dur": 22.0},
        {"ph": "X", "cat": "kernel", "name": "corr_tile_kernel<1, false, false>(half*)", "dur": 3.0},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "dur": 1.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 5.0},   # host side
        {"ph": "i", "cat": "kernel", "name": "instant", "dur": 9.0},                   # not a span
    ]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    assert device_time_us(str(trace)) == (46.0, 4)
    got = per_name_us(device_activity(str(trace)), calls=2)
    assert got[0] == ("marlin::Marlin<256, 1>", pytest.approx(21.0))
    assert dict(got) == {"marlin::Marlin<256, 1>": 21.0, "corr_tile_kernel<1, false, false>": 1.5,
                         "Memset ": 0.5}
