"""crosscheck's trace reading on a synthetic chrome trace (no GPU needed)."""

import json

import pytest

from harness.studies.crosscheck import (
    busy_us,
    device_activity,
    device_spans,
    device_time_us,
    per_name_us,
)


def test_device_activity_sums_by_name(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "void marlin::Marlin<256, 1>(int4 const*)",
         "dur": 20.0},
        {"ph": "X", "cat": "kernel", "name": "void marlin::Marlin<256, 1>(int4 const*)",
         "dur": 22.0},
        {"ph": "X", "cat": "kernel", "name": "corr_tile_kernel<1, false, false>(half*)",
         "dur": 3.0},
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


def _trace(tmp_path, events):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    return str(trace)


def test_the_timers_spin_kernel_is_not_counted_as_the_paths_work(tmp_path):
    trace = _trace(tmp_path, [
        {"ph": "X", "cat": "kernel", "name": "at::cuda::(anonymous namespace)::spin_kernel(long)",
         "ts": 0.0, "dur": 300.0},
        {"ph": "X", "cat": "kernel", "name": "void marlin::Marlin<256, 1>(int4 const*)",
         "ts": 300.0, "dur": 10.0},
    ])
    assert device_time_us(trace) == (10.0, 1)
    assert busy_us(device_spans(trace)) == 10.0
    assert [n for n, _ in per_name_us(device_activity(trace), 1)] == ["marlin::Marlin<256, 1>"]


def test_overlapping_kernels_on_two_streams_count_once():
    spans = [("marlin", 0.0, 10.0), ("correction", 2.0, 4.0),     # inside marlin's span
             ("tail", 8.0, 5.0),                                   # overlaps marlin's end: +3
             ("next", 20.0, 1.0)]                                  # after a 7 us gap
    assert busy_us(spans) == 14.0
    assert busy_us(list(reversed(spans))) == 14.0    # order of the trace does not matter
    assert busy_us([]) == 0.0


def test_anonymous_namespaces_keep_the_kernels_name():
    got = per_name_us(
        [("void at::native::(anonymous namespace)::fill_kernel<float>(float*)", 4.0)], 2)
    assert got == (("at::native::(anon)::fill_kernel<float>", 2.0),)
