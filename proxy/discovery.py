"""Ask the bootstrap brokers which brokers the cluster has, before listening.

The proxy gives every broker its own listener, so it must know the brokers before the first
client arrives: then each listener fronts exactly one broker from the start, and a client
that matches its bootstrap address with a broker's (librdkafka does) is never sent to the
wrong one. The question is the one every client starts with (ApiVersions, then Metadata for
no topics), asked through the product's one Kafka client, so a secured listener is asked
with the ``upstream.*`` TLS and SASL settings. Client connections never use these
credentials: their own login passes through to the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from proxy.config import HostPort
from storage.kafka_client import BrokerAddress, KafkaClient, KafkaClientError
from storage.kafka_security import KafkaSecurityConfig

__all__ = ["DiscoveryError", "discover_brokers"]

_CLIENT_ID = "tierproxy-discovery"


class DiscoveryError(Exception):
    """No bootstrap server told us the cluster's brokers (the message says why, per server)."""


async def discover_brokers(
    bootstrap: Sequence[HostPort],
    *,
    security: KafkaSecurityConfig,
    attempt_seconds: float,
) -> list[BrokerAddress]:
    """Return the brokers of the cluster, asking the bootstrap servers in turn.

    :raises DiscoveryError: when none of them answers within ``attempt_seconds`` each.
    """
    failures: list[str] = []
    for address in bootstrap:
        try:
            async with (
                asyncio.timeout(attempt_seconds),
                KafkaClient(
                    str(address),
                    client_id=_CLIENT_ID,
                    request_timeout_ms=int(attempt_seconds * 1000),
                    security=security,
                ) as client,
            ):
                cluster = await client.metadata(())
            return list(cluster.brokers.values())
        except TimeoutError:
            failures.append(
                f"{address}: no answer to ApiVersions within {attempt_seconds:g} s "
                "(is it a Kafka listener?)"
            )
        except KafkaClientError as err:
            failures.append(str(err))
    raise DiscoveryError("; ".join(failures))
