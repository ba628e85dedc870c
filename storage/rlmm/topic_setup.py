"""Creating and checking the metadata topic before the manager reads or writes it.

Kafka's ``TopicBasedRemoteLogMetadataManager`` creates its topic at start with the
configured partitions, replication factor and ``retention.ms`` (-1: kept forever), and
refuses to go on with a topic of another partition count, since writers would then place a
partition's records in different metadata partitions. This does the same through the
product's client (CreateTopics, Metadata, DescribeConfigs), and checks of its own:

- the replication factor defaults to Kafka's 3, or every broker of a smaller cluster, and
  with three or more replicas the topic gets ``min.insync.replicas=2``: every writer
  produces with ``acks=all``, so a COPY_SEGMENT_FINISHED is then on two brokers before the
  pipeline moves the broker's log start over its range (on one replica only, losing it would
  make the next cycle delete the copy as a leftover after the broker dropped the range);
- an existing topic that is weaker than that on a multi-broker cluster, or has a finite
  ``retention.ms``, is warned about (one line each);
- Kafka's own topic name is refused on a broker that runs native tiered storage (its
  manager would stop at tierproxy's records).

A check the broker does not authorise stops the start with the ACL to add
(:func:`storage.kafka_acls.denied`); it is never skipped quietly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from protocol.errors import KafkaError
from storage.config import ConfigError
from storage.kafka_acls import denied
from storage.kafka_client import (
    BrokerConnectionError,
    ClusterMetadata,
    KafkaClient,
    KafkaClientError,
    NewTopic,
)
from storage.log_event import event
from storage.retry import RetryPolicy, call_with_retry
from storage.retry_log import RetryLog, log_failure, log_recovery
from storage.rlmm.config import (
    DEFAULT_TOPIC_NAME,
    DURABLE_MIN_INSYNC_REPLICAS,
    KAFKA_REPLICATION_FACTOR,
    KAFKA_TOPIC_NAME,
    RemoteLogMetadataConfig,
)
from storage.rlmm.state import RemoteLogMetadataError

__all__ = ["MetadataTopicError", "MetadataTopicSetup"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_NEW_TOPIC_POLL_S = 0.1
"""How often Metadata is asked for a topic just created (it may lag behind CreateTopics)."""
_CLUSTER_RETRY = RetryPolicy(
    backoff_ms=500, backoff_max_ms=10_000, max_attempts=1_000_000, deadline_ms=None
)
"""Reaching the cluster at start: retried until ``start()``'s initialization timeout, or
without bound when the command waits for the cluster (``wait_for_cluster``)."""


class MetadataTopicError(RemoteLogMetadataError):
    """The metadata topic cannot be used: it could not be created, or its partition count
    differs from the configured one."""


class MetadataTopicSetup:
    """Makes sure the metadata topic exists and fits ``config``."""

    def __init__(
        self,
        client: KafkaClient,
        config: RemoteLogMetadataConfig,
        bootstrap: str,
        *,
        principal: str = "User:ANONYMOUS",
    ) -> None:
        """``principal`` is whom the broker sees (:func:`storage.kafka_acls.principal_of`),
        named when it refuses a check."""
        self._client = client
        self.config = config
        self._bootstrap = bootstrap
        self._principal = principal
        self.contacted = False
        """Whether a broker has answered (what a start-up timeout waited for)."""

    async def wait_for_cluster(self) -> None:
        """Ask until a broker answers, however long that takes, logging each retry."""
        await self._retried(self._contact)

    async def ensure(self) -> None:
        """Create or check the topic, retried with Kafka's exponential back-off while no
        broker answers (the proxy or the pipeline may start before the cluster);
        ``start()``'s initialization timeout bounds the wait."""
        count = await self._retried(self._checked_partition_count)
        if count != self.config.topic_partitions:
            raise MetadataTopicError(
                f"metadata topic {self.config.topic_name!r} has {count} partitions but "
                f"remote.log.metadata.topic.partitions is {self.config.topic_partitions}; "
                "writers would place records in different partitions"
            )

    async def _retried(self, request: Callable[[], Awaitable[_T]]) -> _T:
        """``request`` retried while no broker answers; the failures logged with back-off
        (:class:`~storage.retry_log.RetryLog`), and a line when a broker answers after them."""
        failures = RetryLog()

        def warn(attempt: int, error: Exception, wait: float) -> None:
            log_failure(
                failures,
                log,
                "metadata.topic.broker_retry",
                error,
                lambda error, number: (
                    f"no broker at {self._bootstrap} answers yet (attempt {number}: "
                    f"{error}); retrying in {wait:.1f} s"
                ),
                bootstrap=self._bootstrap,
            )

        answer = await call_with_retry(
            request,
            policy=_CLUSTER_RETRY,
            is_retriable=lambda error: isinstance(error, BrokerConnectionError),
            on_retry=warn,
        )
        log_recovery(
            failures,
            log,
            "metadata.topic.broker_reconnected",
            f"a broker at {self._bootstrap} answers",
            bootstrap=self._bootstrap,
        )
        return answer

    async def _contact(self) -> None:
        await self._metadata(())

    async def _metadata(self, topics: Sequence[str] | None) -> ClusterMetadata:
        """The client's Metadata answer; any answer means a broker has been reached."""
        answer = await self._client.metadata(topics)
        self.contacted = True
        return answer

    async def _checked_partition_count(self) -> int:
        if self.config.topic_name == KAFKA_TOPIC_NAME:
            await self._refuse_kafkas_own_topic()
        cluster = await self._metadata(None)
        count = self._partitions_of(cluster)
        if count is None:
            await self._create_topic(len(cluster.brokers))
            while count is None:  # metadata of a new topic may lag behind its creation
                await asyncio.sleep(_NEW_TOPIC_POLL_S)
                count = self._partitions_of(await self._metadata(None))
        else:
            await self._check_existing(cluster)
        return count

    async def _refuse_kafkas_own_topic(self) -> None:
        """Kafka's own metadata manager reads ``__remote_log_metadata`` on brokers with
        native tiered storage, and stops at the first record in tierproxy's format.

        :raises ConfigError: the broker has ``remote.log.storage.system.enable=true``.
        :raises MetadataTopicError: the principal lacks DESCRIBE_CONFIGS on the cluster, or
            the broker answered another error.
        """
        brokers = (await self._metadata(())).brokers
        if not brokers or await self._client.detect_broker_kind() != "kafka":
            return  # only Apache Kafka has native tiered storage
        configs = await self._client.describe_broker_configs(min(brokers))
        if configs == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise MetadataTopicError(
                f"{self._principal} lacks DESCRIBE_CONFIGS on the cluster (DescribeConfigs "
                "answered CLUSTER_AUTHORIZATION_FAILED), needed to check that no native tiered "
                f"storage reads {KAFKA_TOPIC_NAME!r}; add that ACL (docs/operations.md lists "
                "what each part needs) or use another remote.log.metadata.topic.name"
            )
        if isinstance(configs, KafkaError):
            raise MetadataTopicError(
                f"cannot tell whether the broker runs native tiered storage: DescribeConfigs "
                f"of broker {min(brokers)} answered {configs.name}"
            )
        entry = configs.get("remote.log.storage.system.enable")
        if entry is not None and str(entry.value).lower() == "true":
            raise ConfigError(
                f"remote.log.metadata.topic.name is {KAFKA_TOPIC_NAME!r}, the topic "
                "of the broker's own native tiered storage (it has "
                "remote.log.storage.system.enable=true): tierproxy's records would "
                "stop its metadata consumer. Use another name (the default is "
                f"{DEFAULT_TOPIC_NAME!r})"
            )

    async def _check_existing(self, cluster: ClusterMetadata) -> None:
        """Warn about an existing metadata topic that forgets old segments (a finite
        retention) or may lose acknowledged records (too few replicas).

        :raises MetadataTopicError: the principal lacks DESCRIBE_CONFIGS on the topic.
        """
        topic = self.config.topic_name
        try:
            configs = (await self._client.describe_configs([topic])).get(topic, {})
        except KafkaClientError as error:
            # Brokers without DescribeConfigs (Tansu closes the connection) cannot tell.
            configs = KafkaError.UNSUPPORTED_VERSION
            event(
                log,
                logging.INFO,
                "metadata.topic.configs_unreadable",
                msg=f"could not read the metadata topic's configs ({error})",
                topic=self.config.topic_name,
            )
        if configs == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise MetadataTopicError(denied("DescribeConfigs", topic, self._principal))
        if isinstance(configs, KafkaError):
            event(
                log,
                logging.INFO,
                "metadata.topic.configs_unchecked",
                msg=f"not checking the metadata topic's configs ({configs.name})",
                topic=topic,
            )
            return
        entry = configs.get("min.insync.replicas")
        min_insync = int(entry.value or 1) if entry is not None else 1
        self._warn_about_replication(cluster, min_insync)
        entry = configs.get("retention.ms")
        value = int(entry.value or -1) if entry is not None else -1
        if value >= 0:
            event(
                log,
                logging.WARNING,
                "metadata.topic.finite_retention",
                msg=f"metadata topic {topic} has retention.ms={value}: the metadata of "
                "segments older than that will be lost (they can then neither be read nor "
                "deleted); set its retention.ms to -1 as Kafka does",
                topic=topic,
                retention_ms=value,
            )

    def _warn_about_replication(self, cluster: ClusterMetadata, min_insync: int) -> None:
        """One line when the topic is weaker than :meth:`_create_topic` makes it, on a
        cluster that could hold more."""
        found = cluster.topics.get(self.config.topic_name)
        brokers = len(cluster.brokers)
        if found is None or brokers < 2 or not found.partitions:
            return
        replicas = min(len(p.replicas) for p in found.partitions)
        wanted = min(KAFKA_REPLICATION_FACTOR, brokers)
        weak_isr = replicas >= KAFKA_REPLICATION_FACTOR and min_insync < DURABLE_MIN_INSYNC_REPLICAS
        if replicas >= wanted and not weak_isr:
            return
        wanted = max(wanted, replicas)
        wanted_isr = DURABLE_MIN_INSYNC_REPLICAS if wanted >= KAFKA_REPLICATION_FACTOR else 1
        event(
            log,
            logging.WARNING,
            "metadata.topic.weak_replication",
            msg=f"metadata topic {self.config.topic_name} has {replicas} replica(s) and "
            f"min.insync.replicas={min_insync} on a {brokers}-broker cluster: a "
            "COPY_SEGMENT_FINISHED acknowledged by one broker is lost with it, and the next "
            "cycle then deletes the copy after the broker dropped its range; give it "
            f"{wanted} replicas and min.insync.replicas={wanted_isr} "
            "(kafka-reassign-partitions, kafka-configs)",
            topic=self.config.topic_name,
            replicas=replicas,
            min_insync_replicas=min_insync,
        )

    def _partitions_of(self, cluster: ClusterMetadata) -> int | None:
        # Every topic, as before: brokers that ignore allow_auto_topic_creation=false would
        # create a topic named in Metadata with their defaults.
        found = cluster.topics.get(self.config.topic_name)
        if found is None or found.error != KafkaError.NONE:
            return None
        return len(found.partitions) or None

    async def _create_topic(self, brokers: int) -> None:
        config = self.config
        replication = config.replication_for(brokers)
        configs = {"retention.ms": str(config.topic_retention_ms), "cleanup.policy": "delete"}
        if replication >= KAFKA_REPLICATION_FACTOR:
            configs["min.insync.replicas"] = str(DURABLE_MIN_INSYNC_REPLICAS)
        topic = NewTopic(
            name=config.topic_name,
            partitions=config.topic_partitions,
            replication_factor=replication,
            configs=configs,
        )
        for created in await self._client.create_topics([topic]):
            if created.error in (KafkaError.NONE, KafkaError.TOPIC_ALREADY_EXISTS):
                continue
            if created.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                # Metadata hides a topic without DESCRIBE (which READ gives): it may exist.
                raise MetadataTopicError(
                    f"{self._principal} lacks READ on topic {config.topic_name!r}: the metadata "
                    "topic is not visible to it, and CreateTopics answered "
                    "TOPIC_AUTHORIZATION_FAILED (creating it needs CREATE); add that ACL "
                    "(docs/operations.md lists what each part needs)"
                )
            raise MetadataTopicError(
                f"cannot create metadata topic {config.topic_name!r}: "
                f"{created.error.name} {created.message or ''}".rstrip()
            )
        isr = configs.get("min.insync.replicas")
        event(
            log,
            logging.INFO,
            "metadata.topic.created",
            msg=f"created metadata topic {config.topic_name} ({config.topic_partitions} "
            f"partitions, replication factor {replication}"
            + (f", min.insync.replicas {isr})" if isr is not None else ")"),
            topic=config.topic_name,
        )
