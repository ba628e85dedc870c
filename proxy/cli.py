"""The ``tierproxy`` command line.

Each subcommand lives in ``proxy.commands.<name>``, whose ``register(parser)`` adds the
command's arguments and handler to the parser made for it here; its one-line summary is
here, in :data:`COMMANDS`. Run from the command line, only the command named on it is
imported and built whole (the others are listed by their summary): ``tierproxy --help``
imports no command, and a command's own imports stay inside its handler, so that
``--help`` and ``status`` never load PySpark, an object store's client, the proxy's
serving path or the demo's servers.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Final

# Subcommands that have landed with their one-line summary, in the order --help lists them.
COMMANDS: Final[Mapping[str, str]] = {
    "demo": "run an end-to-end demo on embedded servers",
    "serve": "run the proxy in front of a Kafka broker",
    "tier": "copy closed log ranges to remote storage on Spark",
    "status": "show local and remote log offsets and copy lag per partition",
}

Handler = Callable[[argparse.Namespace], int]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every landed subcommand.

    :param argv: the command line about to be parsed: only the command it names is built
        whole, the others are listed by their summary alone (they would never parse).
        Without it every command is built whole.
    """
    parser = argparse.ArgumentParser(
        prog="tierproxy",
        description=(
            "KIP-405 tiered storage for any Kafka cluster: a wire-compatible proxy in front of "
            "an unmodified broker that serves old reads from object storage, and a Spark "
            "pipeline that copies closed log ranges there."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = None if argv is None else named_command(argv)
    for name, summary in COMMANDS.items():
        command = subparsers.add_parser(name, help=summary)
        if argv is None or name == chosen:
            importlib.import_module(f"proxy.commands.{name}").register(command)
    return parser


def named_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level
    parser has no option that takes a value), ``None`` when there is none."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tierproxy`` console script; returns the process exit code."""
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(words).parse_args(words)
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
