"""A disk cache of generated case data, shared by every process of a machine.

Generating a matrix's weights and activations is CPU work in fp64 (``data.py``):
production and swiglu took 20 s of a fresh H100 host's job when the arrays were made
whole, 4.4 s on two CPU cores since ``streams`` makes them in row chunks and threads,
paid again by every bench process without this cache. ``harness job``'s A/B starts six
of them on the same inputs, and the next job on a warm machine a seventh. The arrays are
cached on disk, one ``.npz`` per generated item, so a later process loads them instead.

Keys: the item (``weight`` or ``activations``), its arguments, and a digest of what
determines the bits: the sources of ``data.py`` and ``streams.py`` (any change to the
generator or the quantizer makes new keys; nothing stale is served), numpy's and torch's
versions. Each
file carries the SHA-256 of its arrays (name, dtype, shape, bytes); a file that fails to
load or to match it is regenerated and replaced. Writes go to a temporary file renamed
into place, so concurrent processes and a crash never leave a torn entry. The cache is
best effort: a directory that cannot be written is skipped, with the data generated.
Nothing is evicted (a new generator leaves the old entries behind): delete the folder
to reclaim the space.

``HARNESS_DATA_CACHE``: the directory (default ``~/.cache/int4-harness/data``, beside the
build cache's default); ``0``, ``off`` or ``none`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

ENV = "HARNESS_DATA_CACHE"
_OFF = {"0", "off", "none", "false"}
_DIGEST = "_sha256"


def cache_root() -> Path | None:
    """The cache directory, or None when ``HARNESS_DATA_CACHE`` turns it off."""
    value = os.environ.get(ENV)
    if value is not None and value.strip().lower() in _OFF:
        return None
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "int4-harness" / "data"


def arrays_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over each array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _load(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != _DIGEST}
            stored = str(z[_DIGEST]) if _DIGEST in z.files else ""
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    return arrays if stored and stored == arrays_digest(arrays) else None


def _store(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays, **{_DIGEST: np.array(arrays_digest(arrays))})
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass          # read-only or full disk: the data was generated, the cache is skipped


def cached_arrays(item: str, args: tuple, version_key: str,
                  make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``make()``'s arrays for ``item(*args)``, from the disk cache when an intact entry
    for the same ``version_key`` exists, else made and stored."""
    root = cache_root()
    if root is None:
        return make()
    name = "-".join([item, *(str(a) for a in args), version_key]) + ".npz"
    path = root / name
    got = _load(path)
    if got is not None:
        return got
    arrays = make()
    _store(path, arrays)
    return arrays
