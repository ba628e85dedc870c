"""``tierproxy status``: each tiered partition's local and remote log, and its copy lag."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.settings import Settings

__all__ = ["register"]

_DESCRIPTION = """\
Print, for every partition of the tiered topics (or of the topics matching --topic), the
broker's local log start and end, the remote log start and end with its segment count and
size, and the copy lag (offsets and estimated bytes between the remote log end and the last
stable offset). Reads the broker and the remote log metadata topic; changes nothing.

Every value is printed whole: offsets and bytes as exact integers, - when there is none. A
terminal as wide as the table gets the table; a narrower one gets a block per partition, one
field a line. In a pipe or a file it is always the table, one header line and then one line
per partition with every column, whatever COLUMNS says, for grep and awk. --json prints one
JSON object per partition instead.

Unlike serve and tier, status does not wait for a cluster that is not up: when no broker
answers within --timeout-ms it prints one line and exits 1. Exit codes: 0 all rows fine, 1
a partition row has an error (a missing ACL, say), a tiered topic is hidden from the principal,
or the cluster did not answer, 2 invalid settings (the whole config file is checked first, as
serve and tier check it, and every problem is listed) or a login, ACL or metadata topic the
cluster refuses.

Logs go to stderr in log.format, from WARNING up unless the config file sets log.level."""

_DEFAULT_TIMEOUT_MS = 15_000
"""Long enough for a broker that is busy or far away to answer Metadata (Kafka's own
``request.timeout.ms`` is 30 s, but a person is waiting at a terminal); short enough that a
down cluster is reported well before ``remote.log.metadata.initialization.timeout.ms``."""


def register(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` the ``status`` subcommand's."""
    parser.description = _DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="TOML file of settings (Kafka's names)"
    )
    parser.add_argument(
        "--topic", metavar="REGEX", help="only topics whose whole name matches this pattern"
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    parser.add_argument(
        "--timeout-ms",
        type=int,
        default=_DEFAULT_TIMEOUT_MS,
        metavar="MS",
        help="give up (one line on stderr, exit 1) when no broker answers within MS "
        f"milliseconds (default {_DEFAULT_TIMEOUT_MS}); reading the metadata topic is bounded "
        "by remote.log.metadata.initialization.timeout.ms",
    )
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from proxy.commands.log_setup import settings_with_logs  # noqa: PLC0415
    from storage.config import ConfigError  # noqa: PLC0415
    from storage.kafka_client import KafkaClientError  # noqa: PLC0415
    from storage.rlmm.topic_setup import MetadataTopicError  # noqa: PLC0415

    try:
        # The table is the output; the log says only what went wrong, unless asked for more.
        settings = settings_with_logs(args.config, default_level="WARNING")
    except ConfigError as err:
        # Plain text: the message quotes TOML such as [[topics]], which rich reads as markup.
        print(f"tierproxy status: {err}", file=sys.stderr)
        return 2
    try:
        rows, hidden = asyncio.run(_collect(settings, args.topic, args.timeout_ms / 1000))
    except (ConfigError, MetadataTopicError) as err:  # found against the cluster
        print(f"tierproxy status: {err}", file=sys.stderr)
        return 2
    except (KafkaClientError, TimeoutError) as err:  # no broker; metadata topic too slow
        print(f"tierproxy status: {err}", file=sys.stderr)
        return 1
    problems = list(hidden)
    if args.json:
        for row in rows:
            print(json.dumps(dataclasses.asdict(row)))
    else:
        from proxy.commands.status_layout import status_lines  # noqa: PLC0415

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
        print("\n".join(status_lines(rows, width=width)))
        # The rows have no room for errors: each is one line on stderr, once per message.
        problems[:0] = dict.fromkeys(f"{row.topic}: {row.error}" for row in rows if row.error)
    for line in problems:
        print(f"tierproxy status: {line}", file=sys.stderr)
    return 1 if problems or any(row.error for row in rows) else 0


async def _collect(
    settings: Settings, topic_pattern: str | None, timeout_s: float
) -> tuple[list[Any], list[str]]:
    """The rows, and a line for each tiered topic the broker hides from the principal; the
    cluster is asked once (within ``timeout_s``) before the metadata manager starts, as that
    one retries for a cluster that is not up yet.

    :raises KafkaClientError: no broker answers, or none within ``timeout_s``.
    :raises TimeoutError: the metadata topic could not be read within
        ``remote.log.metadata.initialization.timeout.ms``.
    """
    from storage.kafka_acls import principal_of  # noqa: PLC0415
    from storage.kafka_client import BrokerConnectionError, KafkaClient  # noqa: PLC0415
    from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager  # noqa: PLC0415
    from storage.rsm.factory import create_remote_storage  # noqa: PLC0415
    from storage.startup import check_cluster_login  # noqa: PLC0415
    from storage.tiering.status import collect_status, hidden_topics  # noqa: PLC0415

    config = settings.tiering
    security = settings.security
    async with KafkaClient(
        config.bootstrap_servers,
        client_id=config.client_id,
        request_timeout_ms=config.request_timeout_ms,
        security=security,
    ) as client:
        try:
            async with asyncio.timeout(timeout_s):
                await check_cluster_login(
                    config.bootstrap_servers, security, log=logging.getLogger(__name__)
                )
                await client.metadata(())
        except TimeoutError as err:
            raise BrokerConnectionError(
                f"no broker at {config.bootstrap_servers} answered within "
                f"{round(timeout_s * 1000)} ms"
            ) from err
        storage = create_remote_storage(settings.storage)
        try:
            async with TopicBasedRemoteLogMetadataManager(
                settings.metadata, bootstrap_servers=config.bootstrap_servers, security=security
            ) as rlmm:
                rows = await collect_status(
                    client,
                    rlmm.cache,
                    settings.rules,
                    topic_pattern=topic_pattern,
                    metadata_topic=settings.metadata.topic_name,
                    principal=principal_of(security),
                    stored_size=storage.stored_size,
                )
        finally:
            await storage.close()
        return rows, await hidden_topics(client, settings.rules, principal_of(security))
