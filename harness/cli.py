"""The ``harness`` console script.

Each package contributes its subcommands through a ``register(subparsers)`` function in
its own ``cli`` module (listed in ``_COMMAND_MODULES``); this file only wires them up and
turns the harness's own errors into one-line messages with a non-zero exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Modules that define ``register(subparsers)``. A new command group = one entry here.
_COMMAND_MODULES = (
    "harness.cases.cli",
    "harness.measure.cli",
    "harness.reports.cli",
    "harness.model.cli",
    "harness.commands.job",
)


class HarnessError(Exception):
    """An expected failure with a one-line message (bad input, refused comparison...)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness", description="Benchmark and validate TinyLoop's INT4 GEMM paths."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for modname in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name == modname:  # that command group is not part of this build
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (HarnessError, ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"harness {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"harness {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
