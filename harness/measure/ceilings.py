"""The two ceilings measured at the start of every run: copy bandwidth and GEMM rate.

* Copy: ``dst.copy_(src)`` of a large device buffer (1 GiB on a GPU), counting bytes read
  plus bytes written (2 x size). Random bytes, not zeros.
* GEMM: fp16 ``torch.mm`` (cuBLAS) at 8192 x 8192 x 8192 on random normal data, 2 n^3 flops.
Each is the median of ``runs`` CUDA-event-timed runs after warm-up runs, each read after
``torch.cuda.synchronize()``. On a CPU (no GPU) the same method runs on smaller sizes
(32 MiB copy, fp32 512^3 matmul, ``perf_counter_ns``) so the pipeline is exercised; the
CPU figures are labelled as such and no row is ever rejected against them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from .roofline import Peaks

GPU_COPY_BYTES = 1 << 30
GPU_GEMM_N = 8192
CPU_COPY_BYTES = 32 << 20
CPU_GEMM_N = 512
#: Used when torch does not report the L2 size: larger than any current GPU's L2, so the
#: rotation errs towards more copies (colder), never fewer.
L2_FALLBACK_BYTES = 128 << 20


@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one device (stored in the run's metadata JSON)."""

    device: str
    copy_gbps: float
    copy_bytes_moved: int            # per copy: bytes read + bytes written
    copy_samples_us: tuple[float, ...]
    gemm_tflops: float
    gemm_n: int
    gemm_dtype: str
    gemm_samples_us: tuple[float, ...]
    timer: str                       # "cuda-events" or "perf_counter_ns"

    def peaks(self) -> Peaks:
        return Peaks(self.copy_gbps, self.gemm_tflops, f"measured on {self.device}")

    def numbers(self) -> dict[str, float]:
        """The numeric ceilings (``RunMeta.ceilings`` holds numbers only)."""
        return {"copy_gbps": self.copy_gbps, "gemm_tflops": self.gemm_tflops,
                "copy_bytes_moved": float(self.copy_bytes_moved), "gemm_n": float(self.gemm_n),
                "runs": float(len(self.gemm_samples_us))}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["copy_samples_us"] = list(self.copy_samples_us)
        d["gemm_samples_us"] = list(self.gemm_samples_us)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Ceilings:
        return cls(**{**d, "copy_samples_us": tuple(d["copy_samples_us"]),
                      "gemm_samples_us": tuple(d["gemm_samples_us"])})


def _time_us(fn, device: torch.device, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(runs):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            out.append(start.elapsed_time(end) * 1e3)
    else:
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


def _copy_us(device, nbytes: int, gen, runs: int, warmup: int) -> list[float]:
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device, generator=gen)
    dst = torch.empty_like(src)
    return _time_us(lambda: dst.copy_(src), device, runs, warmup)


def _gemm_us(device, n: int, dtype, gen, runs: int, warmup: int) -> list[float]:
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    c = torch.empty(n, n, device=device, dtype=dtype)
    return _time_us(lambda: torch.mm(a, b, out=c), device, runs, warmup)


def measure_ceilings(device: torch.device | str, runs: int | None = None, warmup: int = 2,
                     copy_bytes: int | None = None, gemm_n: int | None = None) -> Ceilings:
    """Measure copy bandwidth and the fp16 (fp32 on CPU) GEMM rate on ``device``.

    ``runs`` defaults to 15 on a GPU and 5 on a CPU (the CPU figures only exercise the path).
    """
    device = torch.device(device)
    runs = runs if runs is not None else (15 if device.type == "cuda" else 5)
    if runs < 1:
        raise ValueError(f"runs: must be >= 1, got {runs}")
    gpu = device.type == "cuda"
    nbytes = copy_bytes or (GPU_COPY_BYTES if gpu else CPU_COPY_BYTES)
    n = gemm_n or (GPU_GEMM_N if gpu else CPU_GEMM_N)
    gen = torch.Generator(device=device).manual_seed(1234)

    copy_us = _copy_us(device, nbytes, gen, runs, warmup)
    dtype = torch.float16 if gpu else torch.float32
    gemm_us = _gemm_us(device, n, dtype, gen, runs, warmup)
    if gpu:
        torch.cuda.empty_cache()

    copy_med = statistics.median(copy_us)
    gemm_med = statistics.median(gemm_us)
    name = torch.cuda.get_device_name(device) if gpu else "cpu"
    return Ceilings(
        device=name, copy_gbps=2 * nbytes / (copy_med * 1e-6) / 1e9,
        copy_bytes_moved=2 * nbytes, copy_samples_us=tuple(copy_us),
        gemm_tflops=2 * n ** 3 / (gemm_med * 1e-6) / 1e12, gemm_n=n,
        gemm_dtype=str(dtype).replace("torch.", ""), gemm_samples_us=tuple(gemm_us),
        timer="cuda-events" if gpu else "perf_counter_ns",
    )


def l2_cache_bytes(device: torch.device | str) -> int:
    """L2 size of a CUDA device (0 for the CPU: no GPU cache to defeat)."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    return int(size) if size else L2_FALLBACK_BYTES
