"""What the per-(case, path) study commands share: their case/path arguments and the loop.

``case_path_parser(prog, doc, paths)`` builds an ``argparse`` parser with ``--matrix``,
``--filter`` and ``--paths``; ``case_paths(args, device)`` loads the path registry and
lists every (case, path) of the matrix that the path can run here (same kind, available
on ``device``, shape supported), failing first, with its name, on an unknown path.
``run_each(ap, args, device, one, show)`` measures each of them with ``one(case, path)``,
prints a failing one as a one-line error and goes on, and calls ``show`` on each result.
Used by the ``crosscheck``, ``determinism`` and ``timer`` studies.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from harness.cases import MATRICES
from harness.kernels.base import PATHS
from harness.kernels.registry_load import load_all


def case_path_parser(prog: str, doc: str | None, paths: str = "") -> argparse.ArgumentParser:
    """A parser with the shared ``--matrix``, ``--filter`` and ``--paths`` arguments."""
    ap = argparse.ArgumentParser(prog=prog, description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", default="production")
    ap.add_argument("--filter", default=None, help="case filter expression (see `harness cases`)")
    ap.add_argument("--paths", default=paths,
                    help=f"comma list of paths (default: {paths or 'every registered path'})")
    return ap


def case_paths(args: argparse.Namespace, device) -> list[tuple]:
    """(case, path) pairs of ``args.matrix`` / ``args.filter`` / ``args.paths`` runnable here;
    an unknown matrix, filter or path raises ``ValueError`` naming it."""
    load_all()
    names = [p for p in (args.paths or "").split(",") if p] or PATHS.names()
    paths = [PATHS.get(n) for n in names]
    return [(case, path) for case in MATRICES.cases(args.matrix, args.filter) for path in paths
            if case.kind in getattr(path, "kinds", ("gemm",))
            and not (path.unavailable_reason(device) or path.unsupported_reason(case))]


def run_each(ap: argparse.ArgumentParser, args: argparse.Namespace, device,
             one: Callable, show: Callable) -> list:
    """``one(case, path)`` for every pair of ``case_paths``; bad arguments exit via ``ap.error``."""
    try:
        todo = case_paths(args, device)
    except ValueError as exc:
        ap.error(str(exc))
    out = []
    for case, path in todo:
        try:
            r = one(case, path)
        except Exception as exc:
            print(f"{case.id:28s} {path.name:18s} error: {type(exc).__name__}: {exc}"[:200])
            continue
        out.append(r)
        show(r)
    return out
