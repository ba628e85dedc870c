"""``tierproxy tier``: run the Spark tiering pipeline (once, or every task interval)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["register"]

_DESCRIPTION = """\
Copy closed ranges of tiered topics to remote storage with their indexes and KIP-405
metadata, delete expired remote segments, finish the remote data of deleted topics, and
(where the broker supports DeleteRecords) let the broker drop local data that is tiered and
past local.retention.ms/bytes.

Runs on Spark: local[*] by default, any master with --master; with --once it runs one cycle,
otherwise one every remote.log.manager.task.interval.ms (default 30 s) until SIGINT/SIGTERM.
The whole config file is checked first, as serve and status check it: every problem is
listed and tier exits 2 before Spark starts.
To run it on a Spark cluster, submit storage/tiering/job.py with spark-submit (see the
module documentation of storage.tiering).

Logs go to stderr in log.format from log.level (settings of the config file)."""


def register(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` the ``tier`` subcommand's."""
    from storage.tiering.arguments import add_arguments  # noqa: PLC0415

    parser.description = _DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_arguments(parser)
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from proxy.commands.log_setup import settings_with_logs  # noqa: PLC0415
    from storage.config import ConfigError  # noqa: PLC0415
    from storage.rlmm.topic_setup import MetadataTopicError  # noqa: PLC0415
    from storage.tiering.job import TieringSettings, run_from_arguments  # noqa: PLC0415

    try:
        settings = settings_with_logs(args.config)
    except ConfigError as err:
        # Plain text: the message quotes TOML such as [[topics]], which rich reads as markup.
        print(f"tierproxy tier: {err}", file=sys.stderr)
        return 2
    pipeline = TieringSettings(
        tiering=settings.tiering,
        rules=settings.rules,
        storage=settings.storage,
        metadata=settings.metadata,
        security=settings.security,
    )
    try:
        return run_from_arguments(args, default_master="local[*]", settings=pipeline)
    except (ConfigError, MetadataTopicError) as err:  # a missing ACL, say: retrying won't help
        print(f"tierproxy tier: {err}", file=sys.stderr)
        return 2
