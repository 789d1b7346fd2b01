"""``harness cases``: list the cases of a matrix (table, CSV or ids), or the matrices."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ..cases import MATRICES
from .common import plain


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cases", help="print the cases of a shape matrix",
                       description=plain(__doc__))
    p.add_argument("--matrix", "-m", default="smoke",
                   help=f"matrix name ({', '.join(MATRICES.names())}; default smoke)")
    p.add_argument("--filter", "-f", default=None,
                   help="expression over M, N, K, group_size, seed, kind, tags, groups, per_row")
    p.add_argument("--list", action="store_true", help="list the matrices instead")
    p.add_argument("--format", choices=("table", "csv", "ids"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        for name in MATRICES.names():
            spec = MATRICES.spec(name)
            print(f"{name:12s} {len(spec.build()):4d} cases  {spec.description}")
        return 0
    cases = MATRICES.cases(args.matrix, args.filter)
    if args.format == "ids":
        print("\n".join(c.id for c in cases))
        return 0
    cols = ("id", "M", "N", "K", "group_size", "groups", "kind", "tags")
    rows = [(c.id, c.M, c.N, c.K, c.group_size, c.groups, c.kind, ";".join(c.tags)) for c in cases]
    if args.format == "csv":
        print(",".join(cols))
        for r in rows:
            print(",".join(str(v) for v in r))
        return 0
    table = Table(title=f"matrix {args.matrix}: {len(cases)} cases"
                  + (f" (filter: {args.filter})" if args.filter else ""))
    for col in cols:
        numeric = col in ("M", "N", "K", "group_size", "groups")
        table.add_column(col, justify="right" if numeric else "left")
    for r in rows:
        table.add_row(*(str(v) for v in r))
    Console(width=140).print(table)
    return 0
