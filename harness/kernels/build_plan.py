"""What one build of the harness extension for one arch compiles: ``plan_build``.

Pure: no torch, no compiler, no GPU. Given the arch, the toolchain's identity
(``Toolchain``: torch's version, torch's CUDA version, the Python ABI) and where quanto's
Marlin source is (or why it is not), it returns a ``BuildPlan``: the sources, include
folders, nvcc and C++ flags (one ``-gencode`` for the arch, ``-DHARNESS_WITH_MARLIN``),
whether Marlin is compiled in and, if not, why, and the cache key. The bench's own build
(``build.extension()``, for the visible GPU) and ``harness build --arch`` (any arch, no GPU
needed) both plan with this one function, so a build made on another machine is found by
the bench under ``$HARNESS_BUILD_DIR/<plan.name>`` without compiling.

* The key hashes every compiled source and header (quanto's too when Marlin is in), the
  arch, the flags, the toolchain's identity: what loading the built module depends on.
  The nvcc that compiled it is recorded in ``build.json``, not keyed, so that a GPU
  machine without nvcc finds a build made elsewhere.
* Marlin (quanto's ``marlin_cuda_kernel.cu``) needs SM 8.0 (``mma.sync.m16n8k16``,
  ``cp.async``: ptxas refuses both for sm_75). A plan for an older arch leaves it out
  (``HARNESS_WITH_MARLIN=0``) and says why (``MARLIN_ARCH_REASON``); the harness's own
  kernels need nothing newer than sm_75 (the one sm_90 instruction, ``griddepcontrol``,
  is guarded by ``__CUDA_ARCH__``), so every known arch builds them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..archs import Arch
from .marlin.facts import MIN_CAPABILITY as MARLIN_MIN_CAPABILITY

CSRC = Path(__file__).resolve().parent / "csrc"
QUANTO_MARLIN_SOURCE = "marlin_cuda_kernel.cu"
QUANTO_MARLIN_HEADER = "marlin_cuda_kernel.cuh"
CUDA_FLAGS = ("-O3", "-lineinfo")
CXX_FLAGS = ("-O3",)
#: Why a plan for an arch below SM 8.0 has no Marlin (``{sm}``: ``sm_75``).
MARLIN_ARCH_REASON = ("Marlin needs sm_80+ (cp.async, mma.sync m16n8k16); "
                      "this build for {sm} has none")


@dataclass(frozen=True)
class Toolchain:
    """What a built module's loading depends on besides its sources and flags."""

    torch_version: str     # torch.__version__, e.g. "2.11.0+cu130"
    cuda_version: str      # torch.version.cuda, e.g. "13.0"
    python_abi: str        # the extension suffix, e.g. ".cpython-312-x86_64-linux-gnu.so"


@dataclass(frozen=True)
class BuildPlan:
    """One arch's build: what is compiled with which flags, and where it is cached."""

    arch: Arch
    key: str                          # 16 hex digits of the hash
    sources: tuple[str, ...]          # compiled .cu / .cpp files
    include_dirs: tuple[str, ...]
    cuda_flags: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    with_marlin: bool
    marlin_reason: str | None         # why Marlin is left out (None when it is in)
    marlin_source: str | None         # quanto's file compiled in
    toolchain: Toolchain

    @property
    def name(self) -> str:
        """The module's name and its cache folder: ``harness_int4_<key>``."""
        return f"harness_int4_{self.key}"

    @property
    def defines(self) -> tuple[str, ...]:
        return tuple(f for f in self.cuda_flags if f.startswith("-D"))

    def directory(self, root: Path) -> Path:
        """Where this build lives under the build root."""
        return Path(root) / self.name


def own_sources(csrc: Path = CSRC) -> list[Path]:
    """The harness's CUDA/C++ sources and headers, sorted (all of them enter the hash)."""
    return sorted(p for p in Path(csrc).iterdir() if p.suffix in (".cu", ".cpp", ".h", ".cuh"))


def digest(files: Sequence[Path], extra: Sequence[str]) -> str:
    """16 hex digits of SHA-256 over the files' names and bytes, then ``extra``."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    for item in extra:
        h.update(item.encode())
    return h.hexdigest()[:16]


def gencode(arch: Arch) -> str:
    """nvcc's flag for SASS of exactly this arch (no PTX): a build runs on that arch only."""
    return f"-gencode=arch=compute_{arch.tag},code={arch.sm}"


def marlin_arch_reason(arch: Arch) -> str | None:
    """Why quanto's Marlin cannot be built for ``arch``, or None."""
    if arch.capability < tuple(MARLIN_MIN_CAPABILITY):
        return MARLIN_ARCH_REASON.format(sm=arch.sm)
    return None


def plan_build(
    arch: Arch, toolchain: Toolchain, marlin_dir: Path | None, marlin_missing: str | None,
    *, csrc: Path = CSRC,
) -> BuildPlan:
    """The build of the extension for ``arch`` (see the module docstring).

    ``marlin_dir`` is quanto's Marlin folder (``build.quanto_marlin_dir()``), or None with
    ``marlin_missing`` saying why; an arch below SM 8.0 leaves Marlin out either way.
    """
    mine = own_sources(csrc)
    compiled = [p for p in mine if p.suffix in (".cu", ".cpp")]
    hashed = list(mine)
    includes = [str(csrc)]
    arch_reason = marlin_arch_reason(arch)
    with_marlin = marlin_dir is not None and arch_reason is None
    reason = None if with_marlin else (arch_reason or marlin_missing
                                       or "optimum-quanto's Marlin source was not found")
    source = None
    if with_marlin:
        source = Path(marlin_dir) / QUANTO_MARLIN_SOURCE
        compiled.append(source)
        hashed += [source, Path(marlin_dir) / QUANTO_MARLIN_HEADER]
        includes.append(str(marlin_dir))
    defines = (f"-DHARNESS_WITH_MARLIN={int(with_marlin)}",)
    cuda_flags = (*CUDA_FLAGS, gencode(arch), *defines)
    cxx_flags = (*CXX_FLAGS, *defines)
    key = digest(hashed, [arch.tag, toolchain.torch_version, toolchain.cuda_version,
                          toolchain.python_abi, *cuda_flags, *cxx_flags])
    return BuildPlan(
        arch=arch, key=key, sources=tuple(str(p) for p in compiled),
        include_dirs=tuple(includes), cuda_flags=cuda_flags, cxx_flags=cxx_flags,
        with_marlin=with_marlin, marlin_reason=reason,
        marlin_source=str(source) if source is not None else None, toolchain=toolchain,
    )
