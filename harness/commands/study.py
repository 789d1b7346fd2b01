"""``harness study NAME [ARGS...]``: the one-off investigations of ``harness.studies``.

Each study is a module with ``main(argv) -> int`` and its own arguments
(``harness study NAME --help``); the figures in docs/ name the study and the arguments
that produced them. Only the chosen study's module is imported: they pull in torch, the
CUDA extension or the profiler, which ``harness --help`` and the torch-free commands
must not wait for.
"""

from __future__ import annotations

import argparse
import importlib
from typing import NamedTuple


class Study(NamedTuple):
    module: str
    summary: str


#: NAME -> the module whose ``main(argv)`` runs it. A new study = one module + one entry.
STUDIES: dict[str, Study] = {
    "gate": Study("harness.studies.gate_study",
                  "the gate on real GPU noise: margins from separate processes, gated A/A runs "
                  "and planted 5% slowdowns (docs/measurement.md §9)"),
    "planted": Study("harness.studies.planted",
                     "offline planted slowdown: stored runs' samples scaled by exactly --factor, "
                     "gated against a calibrated baseline (no GPU)"),
    "correction": Study("harness.studies.correction_study",
                        "every correction variant of marlin_asym checked and timed against "
                        "Marlin alone (docs/hopper.md)"),
    "kernels": Study("harness.studies.correction_kernels",
                     "each correction kernel's device time beside its floor (the empty "
                     "kernel, bytes / copy bandwidth), per shape and variant (docs/hopper.md)"),
    "determinism": Study("harness.studies.determinism",
                         "run-to-run determinism per (case, path): distinct outputs and the "
                         "accuracy spread (docs/measurement.md §10)"),
    "crosscheck": Study("harness.studies.crosscheck",
                        "event timings against torch.profiler, device time per kernel name"),
    "timer": Study("harness.studies.timer",
                   "one (case, path) timed several ways: graph vs profiler, one call per "
                   "graph, plain loops, clocks"),
}


def _description() -> str:
    width = max(len(n) for n in STUDIES)
    lines = [f"  {name:{width}s}  {s.summary}" for name, s in STUDIES.items()]
    return (__doc__ or "").strip() + "\n\nstudies:\n" + "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="one-off investigations (gate, planted, correction, "
                                     "kernels, determinism, crosscheck, timer)",
                       description=_description(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=list(STUDIES), metavar="NAME",
                   help="the study to run (listed above)")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the study's own arguments (harness study NAME --help)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # importlib, not an import statement: the table above decides which study loads
    module = importlib.import_module(STUDIES[args.name].module)
    return int(module.main(list(args.args)) or 0)
