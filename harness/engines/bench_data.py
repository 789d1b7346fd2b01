"""A ``harness bench --plugin`` that lets another revision's bench read this checkout's
cached case data, when that revision's generator is known to give the same bits.

The case data's disk cache (``cases/data_cache.py``) keys every entry by a hash of the
generator's source (``cases.data.VERSION_KEY``). The A/B and the machine factor run the
bench at the baseline's commit, which computes its own key from its own ``data.py``. Since
the generator was rewritten in row chunks (``cases/streams.py``), the old and the new
source give the same bits under different keys, and a baseline commit's bench found
nothing in the cache: it made the data again with the old generator. That cost about
20 s of a fresh machine's foreign-model job, which measures every gated row there.

The runner (``bench_runner.SubprocessRunner``) gives this file to every bench it starts,
first among the plugins, and plugins load before anything is generated or measured. It
reads the running revision's ``data.py``. If that file's git blob id is in
``SAME_BITS``, it sets the module's ``VERSION_KEY`` to this checkout's key. That bench
then reads and writes the cache under this checkout's key. Otherwise, including this
checkout's own benches, it does nothing. ``HARNESS_BENCH_DATA=0`` turns it off.

``SAME_BITS`` is a claim about bits, and tests/unit/test_data_equivalence.py checks it.
For each listed blob, the test takes the source from git and compares its weights,
activations and quantized case data with this checkout's, and the cache's files in both
directions. When ``data.py`` or ``streams.py`` changes the bits, empty the set. When they
change without changing the bits, add the old blob id.

Like ``bench_gate.py`` it runs inside another revision's bench. It needs that revision's
``harness.cases.data`` module with a module-level ``VERSION_KEY`` read at each call, as
every listed source has, and torch and numpy already imported, as every bench has them
before its plugins.
"""

import hashlib
import os
import sys
from pathlib import Path

from harness.cases import data as _data  # the data module of the revision this bench runs

#: git blob ids of earlier ``harness/cases/data.py`` sources whose generator gives these
#: same bits and whose commits' ``data_cache.py`` reads and writes the same files: every
#: commit from 41158e4 to 007295c, among them the committed baselines' commits
#: (f33d13cd33f1, acffbe3b1f93, 5d57ec3cbb60); and the row-chunked generator as measured
#: on the H100s of 2026-12-05 (99e9c88 to 82ffd795e41b; a one-line wrapper since removed).
SAME_BITS = frozenset({"b9e0ab2660e988d805bd58c9c181dec24074f4c7",
                       "4e6ae4feed723d55a7bcc1151b17dea174a1ea54"})
ENV = "HARNESS_BENCH_DATA"
_CASES = Path(__file__).resolve().parents[1] / "cases"


def blob_id(content: bytes) -> str:
    """The git blob id (SHA-1) of a file with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def current_key(numpy_version: str, torch_version: str) -> str:
    """This checkout's ``cases.data.VERSION_KEY``, computed as ``data.py`` computes it
    (a test holds the two equal)."""
    parts = [(_CASES / "data.py").read_bytes(), (_CASES / "streams.py").read_bytes(),
             numpy_version.encode(), torch_version.encode()]
    return hashlib.sha256(b"|".join(parts)).hexdigest()[:16]


def adopt(module) -> bool:
    """Give ``module`` (a revision's ``harness.cases.data``) this checkout's cache key when
    its source is one of ``SAME_BITS``; whether it did."""
    try:
        source = Path(module.__file__).read_bytes()
    except (OSError, TypeError, AttributeError):
        return False
    if blob_id(source) not in SAME_BITS:
        return False
    numpy, torch = sys.modules["numpy"], sys.modules["torch"]
    module.VERSION_KEY = current_key(numpy.__version__, torch.__version__)
    return True


if os.environ.get(ENV, "1").strip() not in ("0", "off", "false"):
    adopt(_data)
