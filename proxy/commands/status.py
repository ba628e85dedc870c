"""``tierproxy status``: each tiered partition's local and remote log, and its copy lag."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]

_DESCRIPTION = """\
Print, for every partition of the tiered topics (or of the topics matching --topic), the
broker's local log start and end, the remote log start and end with its segment count and
size, and the copy lag (offsets and estimated bytes between the remote log end and the last
stable offset). Reads the broker and the remote log metadata topic; changes nothing."""


def register(subparsers: Any) -> None:
    """Add the ``status`` subcommand."""
    parser = subparsers.add_parser(
        "status",
        help="show local and remote log offsets and copy lag per partition",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="TOML file of settings (Kafka's names)"
    )
    parser.add_argument(
        "--topic", metavar="REGEX", help="only topics whose whole name matches this pattern"
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from proxy.remote.wiring import SHARED_CONFIG_CLASSES  # noqa: PLC0415
    from storage.config import ConfigError  # noqa: PLC0415
    from storage.console import report_console  # noqa: PLC0415
    from storage.tiering.job import load_tiering_settings  # noqa: PLC0415

    try:
        settings = load_tiering_settings(args.config, accepted=SHARED_CONFIG_CLASSES)
    except ConfigError as err:
        # Plain text: the message quotes TOML such as [[topics]], which rich reads as markup.
        print(f"tierproxy status: {err}", file=sys.stderr)
        return 2
    console = report_console()
    try:
        rows = asyncio.run(_collect(settings, args.topic))
    except ConfigError as err:  # found against the cluster
        print(f"tierproxy status: {err}", file=sys.stderr)
        return 2
    if args.json:
        for row in rows:
            print(json.dumps(dataclasses.asdict(row)))
    else:
        from storage.tiering.status import status_table  # noqa: PLC0415

        console.print(status_table(rows))
    return 1 if any(row.error for row in rows) else 0


async def _collect(settings: Any, topic_pattern: str | None) -> list[Any]:
    from storage.kafka_client import KafkaClient  # noqa: PLC0415
    from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager  # noqa: PLC0415
    from storage.startup import check_cluster_login  # noqa: PLC0415
    from storage.tiering.status import collect_status  # noqa: PLC0415

    config = settings.tiering
    security = settings.security.with_secrets_resolved()
    await check_cluster_login(config.bootstrap_servers, security, log=logging.getLogger(__name__))
    async with (
        KafkaClient(
            config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            security=security,
        ) as client,
        TopicBasedRemoteLogMetadataManager(
            settings.metadata,
            bootstrap_servers=config.bootstrap_servers,
            security=security,
        ) as rlmm,
    ):
        return await collect_status(
            client,
            rlmm.cache,
            settings.rules,
            topic_pattern=topic_pattern,
            metadata_topic=settings.metadata.topic_name,
        )
