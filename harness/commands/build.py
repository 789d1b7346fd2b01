"""``harness build [--arch sm75,sm80,...|all]``: compile the harness extension for GPUs that
are not here, into the cache the bench reads.

Each arch gets its own build, planned exactly as the bench plans the build for its visible
GPU (``harness.kernels.build_plan.plan_build``), in ``$HARNESS_BUILD_DIR/<name>``; a bench
on a machine with that GPU and the same torch and Python then loads it without compiling,
even without nvcc. Needs a CUDA build of torch, nvcc, a C++ compiler and ninja; no GPU.
Without ``--arch``: the visible GPU's arch. Per arch it prints the build's name, built or
cached, the seconds, and whether quanto's Marlin is in (or why not: below sm_80, or
optimum-quanto missing). ``--dry-run`` prints the plans and compiles nothing.
Exit 0 when every arch is built or cached, 2 when one failed (its one-line reason).
"""

from __future__ import annotations

import argparse
import math

from ..archs import KNOWN_ARCHS, parse_arch_list
from ..errors import EXIT_ERROR, EXIT_PASS
from ..kernels.build import (
    BuildError,
    BuildOutcome,
    build_root,
    ensure_built,
    plan_for,
    toolchain,
    visible_arch,
)
from ..kernels.build_plan import BuildPlan
from .common import plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="compile the CUDA extension for GPU archs (no GPU needed)",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default=None, metavar="LIST",
                   help=f"comma-separated archs ({', '.join(KNOWN_ARCHS)}; sm_90 and 9.0 "
                        "work too) or 'all'; default: the visible GPU's")
    p.add_argument("--dry-run", action="store_true",
                   help="print each arch's build (name, Marlin or why not) and compile nothing")
    p.set_defaults(func=run)


def _marlin(plan: BuildPlan) -> str:
    return "with Marlin" if plan.with_marlin else f"without Marlin: {plan.marlin_reason}"


def outcome_line(o: BuildOutcome) -> str:
    """One arch's line: arch, name, built/cached/FAILED, seconds, Marlin or why not."""
    p = o.plan
    if not o.ok:
        return f"{p.arch.name:6s} {p.name}  FAILED  {o.error}"
    took = f"{o.seconds:6.1f} s" if math.isfinite(o.seconds) else "     ? s"
    state = "cached" if o.cached else "built "
    return f"{p.arch.name:6s} {p.name}  {state} {took}  {_marlin(p)}"


def run(args: argparse.Namespace) -> int:
    if args.arch:
        archs = parse_arch_list(args.arch)
    else:
        toolchain()                   # a CPU build of torch is named before the GPU is
        try:
            archs = [visible_arch()]
        except BuildError as exc:
            raise BuildError(f"{exc}; pass --arch (known: {', '.join(KNOWN_ARCHS)}, or all) "
                             "to build without that GPU") from None
    plans = [plan_for(a) for a in archs]
    print(f"harness build: {len(plans)} arch(s) into {build_root()} "
          f"(torch {plans[0].toolchain.torch_version}, CUDA {plans[0].toolchain.cuda_version})")
    if args.dry_run:
        for p in plans:
            print(f"{p.arch.name:6s} {p.name}  {p.arch.sm}  {_marlin(p)}")
        return EXIT_PASS
    outcomes = []
    for p in plans:
        outcomes.append(ensure_built(p))
        print(outcome_line(outcomes[-1]), flush=True)
    failed = [o for o in outcomes if not o.ok]
    built = sum(1 for o in outcomes if o.ok and not o.cached)
    print(f"harness build: {built} built, {len(outcomes) - built - len(failed)} cached, "
          f"{len(failed)} failed" + (f" ({', '.join(o.plan.arch.name for o in failed)})"
                                     if failed else ""))
    return EXIT_ERROR if failed else EXIT_PASS
