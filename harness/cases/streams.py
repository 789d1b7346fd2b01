"""Exact uniform streams read at any position, and row chunks evaluated in threads.

The case data (``data.py``) is defined by one PCG64 stream per (item, seed, shape, part):
the stream's 64-bit raw outputs, each split into its low then its high 32-bit half, are
the uniforms' numerators over 2**32, in order. A weight of 8192 x 8192 draws 4 x 67M of
them for its normal part alone; made whole and then combined, that was 1-2 s of memory
traffic per weight and 20 s of a fresh GPU machine's production + swiglu data. Here any
span of a stream is made on its own (``PCG64.advance`` skips to its first raw output), so
a matrix is computed in chunks of rows that stay in cache, several at once in threads
(NumPy releases the GIL in ``random_raw`` and in its ufuncs). The values are the same
bits as the whole-array definition: the same raw outputs, the same correctly rounded
operations per element; tests/unit/test_data.py holds the two equal.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: 2**-32: a 32-bit half times this is its uniform in [0, 1), exactly
_INV_2_32 = 1.0 / 4294967296.0
#: elements per chunk (8 MiB per float64 array): what one thread computes at a time
CHUNK_ELEMS = 1 << 20
#: at most this many threads (the data stage overlaps the extension's compile)
MAX_THREADS = 8


def halves(entropy: tuple[int, ...], start: int, count: int) -> np.ndarray:
    """``count`` 32-bit halves of the stream ``entropy`` from half number ``start`` (half
    2i is raw output i's low 32 bits, 2i + 1 its high ones), as uint32."""
    bitgen = np.random.PCG64(np.random.SeedSequence(list(entropy)))
    r0, r1 = start // 2, (start + count + 1) // 2
    if r0:
        bitgen.advance(r0)
    raw = bitgen.random_raw(r1 - r0)
    # little-endian 64-bit words viewed as pairs of 32-bit ones: low half first, on any host
    words = raw.astype("<u8", copy=False).view("<u4")
    off = start - 2 * r0
    return words[off:off + count]


def uniform_at(entropy: tuple[int, ...], start: int, count: int) -> np.ndarray:
    """float64 uniforms number ``start`` .. ``start + count - 1`` of the stream (exact)."""
    return np.multiply(halves(entropy, start, count), _INV_2_32, dtype=np.float64)


def uniform(entropy: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """The stream's first prod(shape) uniforms in that shape (row-major)."""
    n = int(np.prod(shape))
    return uniform_at(entropy, 0, n).reshape(shape)


def normalish_rows(entropy: tuple[int, ...], shape: tuple[int, int], r0: int, r1: int,
                   sqrt3: float) -> np.ndarray:
    """Rows ``r0:r1`` of Irwin-Hall(4) over ``shape`` scaled to unit variance: element e
    is (((u[e] + u[n + e]) + u[2n + e]) + u[3n + e] - 2) * sqrt(3), n = rows * cols, the
    four terms added in that order."""
    rows, cols = shape
    n, a, count = rows * cols, r0 * cols, (r1 - r0) * cols
    z = uniform_at(entropy, a, count)
    for j in (1, 2, 3):
        z += uniform_at(entropy, j * n + a, count)
    z -= 2.0
    z *= sqrt3
    return z.reshape(r1 - r0, cols)


def by_row_chunks(rows: int, cols: int, fill: Callable[[int, int], None]) -> None:
    """Call ``fill(r0, r1)`` for consecutive row chunks covering ``rows`` (about
    ``CHUNK_ELEMS`` elements each), in threads when there are several; ``fill`` writes
    its rows of the caller's output. An exception in any chunk is raised here."""
    step = max(1, CHUNK_ELEMS // max(1, cols))
    spans = [(r, min(rows, r + step)) for r in range(0, rows, step)]
    workers = min(MAX_THREADS, os.cpu_count() or 1, len(spans))
    if workers <= 1:
        for r0, r1 in spans:
            fill(r0, r1)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="harness-data") as pool:
        for done in [pool.submit(fill, r0, r1) for r0, r1 in spans]:
            done.result()
