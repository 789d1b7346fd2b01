"""``harness paths``: every GEMM path the harness would measure, and where each came from.

Lists the built-in paths, the paths of the installed plugin packages (entry point group
``int4_gemm_harness.paths``, found by every command) and those of ``--plugin`` files, with
their role (``path``: its rows gate; ``peer``: reported, never failing), the devices they
run on and whether they run here (or the one-line reason). A plugin that fails to load is
one line naming it, exit 2. Writing a path: docs/plugins.md.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..engines.plugins import load_plugins
from .common import plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("paths", help="list every GEMM path (built-in and plugins) and its origin",
                       description=plain(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                   help="also load this plugin file or module (as harness bench does)")
    p.add_argument("--cpu", action="store_true",
                   help="say whether each path runs on the CPU (default: the visible GPU, "
                        "else the CPU)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch  # heavy: the paths' availability asks the device

    from harness.kernels import registry_load  # heavy: torch (the paths)

    load_plugins(args.plugin, registry_load.load_all)
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    rows = registry_load.catalog(device)
    table = Table(title=f"harness paths ({len(rows)}; here: {device})", title_justify="left")
    for col in ("path", "role", "origin", "devices", "here", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(escape(r[c]) for c in ("path", "role", "origin", "devices", "here",
                                               "description")))
    Console(width=200, file=sys.stdout).print(table)
    return 0
