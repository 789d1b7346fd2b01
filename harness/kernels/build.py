"""The one JIT-built CUDA extension: the harness's own kernels plus quanto's Marlin source.

``extension()`` compiles every ``.cu``/``.cpp`` in ``harness/kernels/csrc/`` (native INT4,
the seed's correction kernels, the correction variants, one file per variant family
sharing ``correction_variants.cuh``, and their torch/pybind glue; every header enters the
hash) and, when optimum-quanto is installed, quanto's ``marlin_cuda_kernel.cu`` (located
inside the installed package at run time, never copied into this repository) into one
module with ``torch.utils.cpp_extension.load``.

* Compiled for the GPU in use only: ``-gencode=arch=compute_XY,code=sm_XY``.
* Cached by a hash of every source, the flags, the arch, torch's and CUDA's versions: the
  module name carries the hash and the build lives in ``$HARNESS_BUILD_DIR/<name>`` (default
  ``~/.cache/int4-harness/<name>``). A second run finds ``<name>.so`` and imports it without
  invoking the compiler (``BuildInfo.cached``); the first build's time is kept in
  ``build.json`` beside it.
* Anything missing (CUDA torch, a GPU, nvcc, a C++ compiler, ninja) or a failed compile
  raises ``BuildError`` with one line; the compiler's output goes to ``build-error.log``.
* Without quanto the quanto-free part is still built (``has_marlin() == False``) and
  ``BuildInfo.marlin_reason`` says why Marlin is absent.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from harness.errors import HarnessError

CSRC = Path(__file__).resolve().parent / "csrc"
QUANTO_MARLIN_SUBDIR = ("quanto", "library", "extensions", "cuda", "marlin")
QUANTO_MARLIN_SOURCE = "marlin_cuda_kernel.cu"
QUANTO_MARLIN_HEADER = "marlin_cuda_kernel.cuh"
_CUDA_FLAGS = ("-O3", "-lineinfo")
_CXX_FLAGS = ("-O3",)


class BuildError(HarnessError, RuntimeError):
    """The extension cannot be built or loaded here; the message is one line saying why."""


@dataclass(frozen=True)
class BuildInfo:
    """How the extension in use was obtained (reported with results)."""

    name: str
    build_dir: str
    arch: str                # "sm_90"
    torch_version: str
    cuda_version: str
    with_marlin: bool
    marlin_reason: str | None   # why Marlin is absent (None when compiled in)
    marlin_source: str | None   # the quanto file compiled in
    build_seconds: float        # time of the compile that produced the module
    load_seconds: float         # time of this process's load
    cached: bool                # True: loaded an earlier build, nothing was compiled


def quanto_marlin_dir() -> tuple[Path | None, str | None]:
    """(quanto's Marlin source folder, None) or (None, why not). Does not import quanto."""
    try:
        spec = importlib.util.find_spec("optimum")
    except (ImportError, ValueError) as exc:
        return None, f"optimum-quanto is not importable ({exc})"
    if spec is None or not spec.submodule_search_locations:
        return None, "optimum-quanto is not installed (pip install 'int4-gemm-harness[quanto]')"
    for root in spec.submodule_search_locations:
        folder = Path(root).joinpath(*QUANTO_MARLIN_SUBDIR)
        if (folder / QUANTO_MARLIN_SOURCE).is_file() and (folder / QUANTO_MARLIN_HEADER).is_file():
            return folder, None
    return None, ("optimum is installed but "
                  f"{'/'.join(QUANTO_MARLIN_SUBDIR)}/{QUANTO_MARLIN_SOURCE} "
                  "is not in it (install optimum-quanto==0.2.7)")


def own_sources() -> list[Path]:
    """The harness's CUDA/C++ sources and headers, sorted (all of them enter the hash)."""
    return sorted(p for p in CSRC.iterdir() if p.suffix in (".cu", ".cpp", ".h", ".cuh"))


def build_root() -> Path:
    env = os.environ.get("HARNESS_BUILD_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "int4-harness"


def _check_toolchain() -> tuple[object, str, str]:
    """(torch, arch tag "XY", cuda version) or BuildError naming what is missing."""
    try:
        import torch  # the extension build: build.py stays importable without torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise BuildError(f"torch is not importable: {exc}") from None
    if torch.version.cuda is None:
        raise BuildError(f"torch {torch.__version__} is a CPU build; "
                         "the CUDA paths need a CUDA build of torch")
    if not torch.cuda.is_available():
        raise BuildError("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)")
    from torch.utils import cpp_extension  # the extension build: loaded only when building

    nvcc = Path(cpp_extension.CUDA_HOME or "", "bin", "nvcc")
    if not (cpp_extension.CUDA_HOME and nvcc.is_file()) and shutil.which("nvcc") is None:
        raise BuildError("nvcc not found: set CUDA_HOME or put the CUDA toolkit's nvcc on PATH")
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise BuildError(f"C++ compiler {cxx!r} not found: install g++ or set CXX")
    if not cpp_extension.is_ninja_available():
        raise BuildError("ninja not found: torch.utils.cpp_extension needs it (pip install ninja)")
    major, minor = torch.cuda.get_device_capability()
    return torch, f"{major}{minor}", str(torch.version.cuda)


def _nvcc_version() -> str:
    from torch.utils import cpp_extension  # the extension build: loaded only when building

    nvcc = str(Path(cpp_extension.CUDA_HOME or "", "bin", "nvcc"))
    if not Path(nvcc).is_file():
        nvcc = shutil.which("nvcc") or "nvcc"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def _digest(files: list[Path], extra: list[str]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    for item in extra:
        h.update(item.encode())
    return h.hexdigest()[:16]


def _import_so(name: str, so: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(so))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _build() -> tuple[ModuleType, BuildInfo]:
    torch, arch, cuda_version = _check_toolchain()
    from torch.utils import cpp_extension  # the extension build: loaded only when building

    marlin_dir, marlin_reason = quanto_marlin_dir()
    mine = own_sources()
    compiled = [p for p in mine if p.suffix in (".cu", ".cpp")]
    hashed = list(mine)
    defines = [f"-DHARNESS_WITH_MARLIN={int(marlin_dir is not None)}"]
    includes = [str(CSRC)]
    if marlin_dir is not None:
        quanto_src = marlin_dir / QUANTO_MARLIN_SOURCE
        compiled.append(quanto_src)
        hashed += [quanto_src, marlin_dir / QUANTO_MARLIN_HEADER]
        includes.append(str(marlin_dir))
    gencode = f"-gencode=arch=compute_{arch},code=sm_{arch}"
    cuda_flags = [*_CUDA_FLAGS, gencode, *defines]
    cxx_flags = [*_CXX_FLAGS, *defines]
    key = _digest(hashed, [arch, torch.__version__, cuda_version, _nvcc_version(), sys.version,
                           *cuda_flags, *cxx_flags])
    name = f"harness_int4_{key}"
    build_dir = build_root() / name
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"build directory {build_dir} cannot be created ({exc.strerror or exc}); "
                         "set HARNESS_BUILD_DIR to a writable folder") from None
    so = build_dir / f"{name}.so"
    meta = build_dir / "build.json"
    t0 = time.perf_counter()
    cached = so.is_file()
    if cached:
        module = _import_so(name, so)
    else:
        try:
            module = cpp_extension.load(
                name=name, sources=[str(p) for p in compiled], extra_cflags=cxx_flags,
                extra_cuda_cflags=cuda_flags, extra_include_paths=includes,
                build_directory=str(build_dir), with_cuda=True, verbose=False,
            )
        except Exception as exc:  # compiler/linker output is long; keep it in a file
            log = build_dir / "build-error.log"
            log.write_text(f"{type(exc).__name__}: {exc}\n")
            raise BuildError(f"compiling the harness extension for sm_{arch} failed; "
                             f"compiler output in {log}") from None
    load_seconds = time.perf_counter() - t0
    build_seconds = load_seconds
    if cached and meta.is_file():
        try:
            build_seconds = float(json.loads(meta.read_text())["build_seconds"])
        except (ValueError, KeyError, OSError):
            build_seconds = float("nan")
    info = BuildInfo(
        name=name, build_dir=str(build_dir), arch=f"sm_{arch}", torch_version=torch.__version__,
        cuda_version=cuda_version, with_marlin=bool(module.has_marlin()),
        marlin_reason=None if marlin_dir is not None else marlin_reason,
        marlin_source=str(marlin_dir / QUANTO_MARLIN_SOURCE) if marlin_dir is not None else None,
        build_seconds=build_seconds, load_seconds=load_seconds, cached=cached,
    )
    if not cached:
        meta.write_text(json.dumps(asdict(info), indent=2) + "\n")
    return module, info


def extension() -> ModuleType:
    """The built extension (built or loaded once per process). Raises ``BuildError``."""
    with _LOCK:
        if "module" in _STATE:
            return _STATE["module"]  # type: ignore[return-value]
        if "error" in _STATE:
            raise BuildError(str(_STATE["error"]))
        try:
            module, info = _build()
        except BuildError as exc:
            _STATE["error"] = str(exc)
            raise
        _STATE["module"], _STATE["info"] = module, info
        return module


def build_info() -> BuildInfo | None:
    """The ``BuildInfo`` of the extension loaded in this process, or None before ``extension()``."""
    return _STATE.get("info")  # type: ignore[return-value]


def extension_unavailable_reason() -> str | None:
    """None when ``extension()`` succeeds; otherwise its one-line reason (never raises)."""
    try:
        extension()
    except BuildError as exc:
        return str(exc)
    return None


def marlin_unavailable_reason() -> str | None:
    """None when quanto's Marlin is compiled into the extension; otherwise why not."""
    reason = extension_unavailable_reason()
    if reason is not None:
        return reason
    info = build_info()
    if info is not None and not info.with_marlin:
        return f"Marlin (quanto provider) not built: {info.marlin_reason}"
    return None
