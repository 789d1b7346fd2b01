"""Seconds to compile each translation unit of the harness extension, one at a time.

A fresh GPU machine's job starts with the extension's build (``harness.kernels.build``),
whose ninja runs the units in parallel: the build's wall time is about its slowest unit
plus the link. This script compiles every unit of ``build_plan.plan_build`` for one arch
alone, with the plan's flags and the ones ``torch.utils.cpp_extension`` adds, and prints
each unit's seconds, slowest first. It needs nvcc and a C++ compiler, not a GPU: on a CPU
build of torch, ``--stub-cuda-macros`` supplies the one generated header
(``c10/cuda/impl/cuda_cmake_macros.h``) that CPU wheels leave out, so the C++ glue, which
includes c10's CUDA stream and guard headers, compiles there too (objects only: nothing
here links or loads them).

    python scripts/tu_compile_times.py --arch sm90 --marlin-dir DIR [--stub-cuda-macros]

``--marlin-dir``: quanto's ``library/extensions/cuda/marlin`` folder (default: the installed
optimum-quanto's; without one the plan leaves Marlin out, as the bench would).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import torch
from torch.utils import cpp_extension

from harness.archs import parse_arch
from harness.kernels.build import quanto_marlin_dir
from harness.kernels.build_plan import Toolchain, plan_build

STUB = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


def compile_one(source: Path, plan, includes: list[str], out: Path) -> tuple[float, str]:
    """(seconds, "" or the compiler's last error line) of compiling ``source`` alone."""
    inc = [f"-I{d}" for d in includes]
    common = ["-std=c++17", "-DTORCH_EXTENSION_NAME=" + plan.name,
              "-DTORCH_API_INCLUDE_EXTENSION_H"]
    if source.suffix == ".cu":
        cmd = ["nvcc", "-c", *plan.cuda_flags, *cpp_extension.COMMON_NVCC_FLAGS, *common,
               "--compiler-options", "-fPIC", *inc, str(source), "-o", str(out)]
    else:
        cmd = [shutil.which("c++") or "g++", "-c", "-fPIC", *plan.cxx_flags, *common, *inc,
               str(source), "-o", str(out)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    errors = [ln for ln in done.stderr.splitlines() if "error" in ln]
    return took, "" if done.returncode == 0 else (errors[-1] if errors else "failed")[:160]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm90")
    p.add_argument("--marlin-dir", type=Path, default=None)
    p.add_argument("--stub-cuda-macros", action="store_true")
    args = p.parse_args(argv)
    marlin_dir, missing = (args.marlin_dir, None) if args.marlin_dir else quanto_marlin_dir()
    # the toolchain only names the plan (its key); a CPU torch has no CUDA version
    tools = Toolchain(torch.__version__, torch.version.cuda or "none",
                      sysconfig.get_config_var("EXT_SUFFIX") or "")
    plan = plan_build(parse_arch(args.arch), tools, marlin_dir, missing)
    with tempfile.TemporaryDirectory(prefix="tu-times-") as tmp:
        includes = [*plan.include_dirs, *cpp_extension.include_paths(),
                    sysconfig.get_paths()["include"]]
        cuda_home = (os.environ.get("CUDA_HOME") or cpp_extension.CUDA_HOME
                     or ("/usr/local/cuda" if Path("/usr/local/cuda").is_dir() else None))
        includes += [str(Path(cuda_home) / "include")] if cuda_home else []
        if args.stub_cuda_macros:
            stub = Path(tmp) / "stub" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
            stub.parent.mkdir(parents=True)
            stub.write_text(STUB)
            includes.append(str(Path(tmp) / "stub"))
        rows = []
        for i, src in enumerate(map(Path, plan.sources)):
            took, err = compile_one(src, plan, includes, Path(tmp) / f"{i}.o")
            rows.append((took, src.name, err))
            print(f"{took:6.1f} s  {src.name}{'  FAILED: ' + err if err else ''}", flush=True)
    print(f"{plan.name} ({plan.arch.sm}, marlin {'in' if plan.with_marlin else 'out'}): "
          f"{len(rows)} units, serial {sum(r[0] for r in rows):.1f} s, "
          f"slowest {max(rows)[1]} {max(rows)[0]:.1f} s")
    return 1 if any(r[2] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
