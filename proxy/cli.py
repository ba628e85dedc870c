"""The ``tierproxy`` command line.

Each subcommand lives in ``proxy.commands.<name>`` and registers itself through a
``register(subparsers)`` function; heavy imports (Spark, the demo's servers) happen inside the
command's handler so that ``tierproxy --help`` and ``tierproxy serve`` stay fast and
never import PySpark.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# Subcommands that have landed, in the order --help lists them.
COMMANDS: tuple[str, ...] = ("demo", "serve", "tier", "status")

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every landed subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="tierproxy",
        description=(
            "KIP-405 tiered storage for any Kafka cluster: a wire-compatible proxy in front of "
            "an unmodified broker that serves old reads from object storage, and a Spark "
            "pipeline that copies closed log ranges there."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"proxy.commands.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tierproxy`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
