"""The ``harness`` console script.

Wires the commands: each module of ``harness.commands`` contributes one subcommand through
``register(subparsers)`` (listed in ``COMMANDS``, in help order) and runs it with
``run(args)``. This file only builds the parser and turns the harness's expected errors
(``harness.errors.EXPECTED_ERRORS``) into one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from .commands import (
    baseline,
    bench,
    bisect,
    build,
    cases,
    compare,
    history,
    job,
    merge,
    paths,
    policy,
    ppl,
    report,
    study,
)
from .errors import EXPECTED_ERRORS, one_line

#: The command modules, in the order ``harness --help`` lists them. A new command = one
#: module with ``register(sub)`` and ``run(args)``, and one entry here.
COMMANDS = (cases, paths, bench, job, ppl, report, merge, compare, history, bisect, policy,
            baseline, study, build)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness", description="Benchmark and validate TinyLoop's INT4 GEMM paths."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except EXPECTED_ERRORS as exc:
        print(f"harness {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"harness {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
