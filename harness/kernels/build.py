"""The one JIT-built CUDA extension: the harness's own kernels plus quanto's Marlin source.

``extension()`` compiles every ``.cu``/``.cpp`` in ``harness/kernels/csrc/`` (native INT4,
the seed's correction kernels, the correction variants, one file per variant family
sharing ``correction_variants.cuh``, and their torch/pybind glue; every header enters the
hash) and, when optimum-quanto is installed, quanto's ``marlin_cuda_kernel.cu`` (located
inside the installed package at run time, never copied into this repository) into one
module with ``torch.utils.cpp_extension.load``.

* One build per arch: ``-gencode=arch=compute_XY,code=sm_XY``. What a build compiles,
  its flags and its cache key come from one pure function, ``build_plan.plan_build``:
  the bench plans for the visible GPU, ``harness build --arch`` (``ensure_built``) for any
  arch without that GPU, and both land in the same folder.
* Cached in ``$HARNESS_BUILD_DIR/<name>`` (default ``~/.cache/int4-harness/<name>``), the
  name carrying the key. A process that finds ``<name>.so`` imports it without a compiler
  (``BuildInfo.cached``), even on a machine without nvcc; the build's time and the nvcc
  that made it are kept in ``build.json`` beside it.
* Anything missing (CUDA torch, a GPU for the bench, nvcc / a C++ compiler / ninja when
  there is no cached build) or a failed compile raises ``BuildError`` with one line; the
  compiler's output goes to ``build-error.log``. With no cached build and no compiler the
  line names the arch and the ``harness build --arch smXY`` to run on a machine with nvcc.
* Without quanto, or for an arch below SM 8.0, the quanto-free part is still built
  (``has_marlin() == False``) and ``BuildInfo.marlin_reason`` says why Marlin is absent.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from ..archs import Arch
from ..errors import HarnessError
from .build_plan import (
    CSRC,
    QUANTO_MARLIN_HEADER,
    QUANTO_MARLIN_SOURCE,
    BuildPlan,
    Toolchain,
    own_sources,
    plan_build,
)

__all__ = ["CSRC", "BuildError", "BuildInfo", "BuildOutcome", "CannotCompileError", "build_info",
           "build_root", "ensure_built", "extension", "extension_unavailable_reason",
           "marlin_unavailable_reason", "own_sources", "plan_for", "quanto_marlin_dir",
           "toolchain", "visible_arch"]

QUANTO_MARLIN_SUBDIR = ("quanto", "library", "extensions", "cuda", "marlin")


class BuildError(HarnessError, RuntimeError):
    """The extension cannot be built or loaded here; the message is one line saying why."""


class CannotCompileError(BuildError):
    """No compiler here for this build (nvcc, a C++ compiler, ninja, or an nvcc too old for
    the arch); the bench turns it into the ``harness build --arch`` hint."""


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
    nvcc: str = ""              # the nvcc that compiled it ("" when not recorded)


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


def build_root() -> Path:
    """``$HARNESS_BUILD_DIR``, else ``~/.cache/int4-harness``: every build's parent folder."""
    env = os.environ.get("HARNESS_BUILD_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "int4-harness"


def _torch():
    try:
        import torch  # the extension build: build.py stays importable without torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise BuildError(f"torch is not importable: {exc}") from None
    return torch


def toolchain() -> Toolchain:
    """This process's torch, its CUDA version and the Python ABI; ``BuildError`` on a CPU
    build of torch (the extension needs a CUDA build, a GPU does not have to be there)."""
    torch = _torch()
    if torch.version.cuda is None:
        raise BuildError(f"torch {torch.__version__} is a CPU build; "
                         "the CUDA paths need a CUDA build of torch")
    abi = sysconfig.get_config_var("EXT_SUFFIX") or sys.version.split()[0]
    return Toolchain(torch_version=torch.__version__, cuda_version=str(torch.version.cuda),
                     python_abi=str(abi))


def visible_arch() -> Arch:
    """The arch of the GPU torch uses; ``BuildError`` when none is visible."""
    torch = _torch()
    if not torch.cuda.is_available():
        raise BuildError("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)")
    major, minor = torch.cuda.get_device_capability()
    return Arch.of(major, minor)


def plan_for(arch: Arch) -> BuildPlan:
    """``plan_build`` for ``arch`` with this process's toolchain and installed quanto."""
    marlin_dir, why = quanto_marlin_dir()
    return plan_build(arch, toolchain(), marlin_dir, why)


def _nvcc_path() -> str | None:
    from torch.utils import cpp_extension  # the extension build: loaded only when building

    nvcc = Path(cpp_extension.CUDA_HOME or "", "bin", "nvcc")
    if cpp_extension.CUDA_HOME and nvcc.is_file():
        return str(nvcc)
    return shutil.which("nvcc")


def compiler_missing() -> str | None:
    """Why this machine cannot compile the extension (nvcc, a C++ compiler, ninja), or None."""
    from torch.utils import cpp_extension  # the extension build: loaded only when building

    if _nvcc_path() is None:
        return "nvcc not found: set CUDA_HOME or put the CUDA toolkit's nvcc on PATH"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"C++ compiler {cxx!r} not found: install g++ or set CXX"
    if not cpp_extension.is_ninja_available():
        return "ninja not found: torch.utils.cpp_extension needs it (pip install ninja)"
    return None


def _run_nvcc(*args: str) -> str:
    try:
        out = subprocess.run([_nvcc_path() or "nvcc", *args], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip()


def nvcc_version() -> str:
    """The last line of ``nvcc --version`` ("unknown" when it cannot be run)."""
    out = _run_nvcc("--version")
    return out.splitlines()[-1] if out else "unknown"


def _nvcc_lacks(arch: Arch) -> str | None:
    """Why this nvcc cannot compile for ``arch`` (its ``--list-gpu-arch``), or None."""
    listed = set(_run_nvcc("--list-gpu-arch").split())
    if listed and f"compute_{arch.tag}" not in listed:
        return (f"this nvcc ({nvcc_version()}) cannot compile for {arch.sm}: "
                f"its --list-gpu-arch has no compute_{arch.tag} (use a newer CUDA toolkit)")
    return None


def _import_so(name: str, so: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(name, str(so))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def _load_cached(plan: BuildPlan, so: Path) -> ModuleType:
    try:
        return _import_so(plan.name, so)
    except (ImportError, OSError) as exc:
        raise BuildError(f"the cached build {so} cannot be loaded ({exc}); delete "
                         f"{so.parent} to build it again") from None


def _no_build_here(plan: BuildPlan, why: str) -> BuildError:
    tc = plan.toolchain
    return BuildError(
        f"no build of the harness extension for {plan.arch.sm} in {build_root()} "
        f"({plan.name}) and this machine cannot compile one ({why}); run "
        f"`harness build --arch {plan.arch.name}` on a machine with nvcc, torch "
        f"{tc.torch_version}, the same Python and optimum-quanto, into a HARNESS_BUILD_DIR "
        "this machine reads")


def _compile(plan: BuildPlan) -> ModuleType:
    """Compile ``plan`` into its folder and import it (``BuildError`` with one line)."""
    from torch.utils import cpp_extension  # the extension build: loaded only when building

    missing = compiler_missing() or _nvcc_lacks(plan.arch)
    if missing:
        raise CannotCompileError(missing)
    build_dir = plan.directory(build_root())
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"build directory {build_dir} cannot be created ({exc.strerror or exc}); "
                         "set HARNESS_BUILD_DIR to a writable folder") from None
    try:
        return cpp_extension.load(
            name=plan.name, sources=list(plan.sources), extra_cflags=list(plan.cxx_flags),
            extra_cuda_cflags=list(plan.cuda_flags), extra_include_paths=list(plan.include_dirs),
            build_directory=str(build_dir), with_cuda=True, verbose=False,
        )
    except Exception as exc:  # compiler/linker output is long; keep it in a file
        log = build_dir / "build-error.log"
        log.write_text(f"{type(exc).__name__}: {exc}\n")
        raise BuildError(f"compiling the harness extension for {plan.arch.sm} failed; "
                         f"compiler output in {log}") from None


def _recorded(meta: Path) -> dict:
    try:
        data = json.loads(meta.read_text())
    except (ValueError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def _info(plan: BuildPlan, *, with_marlin: bool, build_seconds: float, load_seconds: float,
          cached: bool, nvcc: str) -> BuildInfo:
    return BuildInfo(
        name=plan.name, build_dir=str(plan.directory(build_root())), arch=plan.arch.sm,
        torch_version=plan.toolchain.torch_version, cuda_version=plan.toolchain.cuda_version,
        with_marlin=with_marlin, marlin_reason=plan.marlin_reason,
        marlin_source=plan.marlin_source, build_seconds=build_seconds,
        load_seconds=load_seconds, cached=cached, nvcc=nvcc,
    )


def _load_or_build(plan: BuildPlan) -> tuple[ModuleType, BuildInfo]:
    """The module of ``plan``: imported from the cache, else compiled (then recorded)."""
    build_dir = plan.directory(build_root())
    so, meta = build_dir / f"{plan.name}.so", build_dir / "build.json"
    t0 = time.perf_counter()
    cached = so.is_file()
    module = _load_cached(plan, so) if cached else _compile(plan)
    load_seconds = time.perf_counter() - t0
    if cached:
        recorded = _recorded(meta)
        try:
            build_seconds = float(recorded["build_seconds"])
        except (KeyError, TypeError, ValueError):
            build_seconds = float("nan")
        info = _info(plan, with_marlin=bool(module.has_marlin()), build_seconds=build_seconds,
                     load_seconds=load_seconds, cached=True, nvcc=str(recorded.get("nvcc", "")))
    else:
        info = _info(plan, with_marlin=bool(module.has_marlin()), build_seconds=load_seconds,
                     load_seconds=load_seconds, cached=False, nvcc=nvcc_version())
        meta.write_text(json.dumps(asdict(info), indent=2) + "\n")
    return module, info


def _build() -> tuple[ModuleType, BuildInfo]:
    """The bench's build: the visible GPU's plan, loaded from the cache or compiled."""
    toolchain()                       # a CPU build of torch is named before the GPU is
    plan = plan_for(visible_arch())
    try:
        return _load_or_build(plan)
    except CannotCompileError as exc:
        raise _no_build_here(plan, str(exc)) from None


@dataclass(frozen=True)
class BuildOutcome:
    """One arch of ``harness build``: cached or built, how long, Marlin in or why not."""

    plan: BuildPlan
    directory: str
    cached: bool
    seconds: float              # compile time when built; the build's recorded time when cached
    error: str | None = None    # the one-line BuildError when it failed

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def so(self) -> str:
        return str(Path(self.directory) / f"{self.plan.name}.so")


def ensure_built(plan: BuildPlan) -> BuildOutcome:
    """Compile ``plan`` unless its ``.so`` is in the cache already; never needs a GPU.

    A failed build is returned (``error``), not raised, so a fleet build reports every
    arch. A compiled module is imported once to check it says what the plan says about
    Marlin (``has_marlin``).
    """
    build_dir = plan.directory(build_root())
    so = build_dir / f"{plan.name}.so"
    if so.is_file():
        try:
            seconds = float(_recorded(build_dir / "build.json")["build_seconds"])
        except (KeyError, TypeError, ValueError):
            seconds = float("nan")
        return BuildOutcome(plan, str(build_dir), cached=True, seconds=seconds)
    t0 = time.perf_counter()
    try:
        module, info = _load_or_build(plan)
    except BuildError as exc:
        return BuildOutcome(plan, str(build_dir), cached=False,
                            seconds=time.perf_counter() - t0, error=str(exc))
    if info.with_marlin != plan.with_marlin:
        return BuildOutcome(plan, str(build_dir), cached=False, seconds=info.build_seconds,
                            error=f"the module's has_marlin() is {info.with_marlin}, "
                                  f"the plan's {plan.with_marlin}")
    return BuildOutcome(plan, str(build_dir), cached=info.cached, seconds=info.build_seconds)


_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


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
    """None when quanto's Marlin is compiled into the extension; otherwise why not (quanto
    missing, or ``build_plan.MARLIN_ARCH_REASON`` for a GPU below SM 8.0)."""
    reason = extension_unavailable_reason()
    if reason is not None:
        return reason
    info = build_info()
    if info is not None and not info.with_marlin:
        return f"Marlin (quanto provider) not built: {info.marlin_reason}"
    return None
