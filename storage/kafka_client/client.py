"""A small asyncio Kafka client that speaks the raw protocol through :mod:`protocol`.

It is the product's one Kafka client: the tiering pipeline, ``tierproxy status``, the
proxy's broker discovery and the metadata manager's producer, consumer and admin calls all
use it (``docs/architecture.md``, "One Kafka client", says why it is not aiokafka). It sends
exactly the requests they need, over one pipelined connection per broker
(:mod:`.connection`), with versions negotiated through ApiVersions; the requests themselves
are built and read in :mod:`.reads`, :mod:`.writes` and :mod:`.admin`.

Brokers differ. Tansu advertises DeleteRecords but drops the connection when it gets one, so
:attr:`KafkaClient.broker_kind` tells brokers apart from their ApiVersions answer (Apache
Kafka has always had OffsetForLeaderEpoch; Tansu has not, and reports no feature epoch) and
:meth:`KafkaClient.delete_records` refuses to send to anything but Apache Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Self

from protocol.errors import KafkaError
from protocol.messages import ApiKey
from storage.kafka_client import admin, reads, transactions, writes
from storage.kafka_client.connection import Connection, Login
from storage.kafka_client.values import (
    READ_UNCOMMITTED,
    BrokerAddress,
    BrokerConnectionError,
    BrokerKind,
    ClusterMetadata,
    ConfigEntry,
    CreatedTopic,
    DeletedRecords,
    DeleteRecordsUnsupportedError,
    FetchedPartition,
    FetchTarget,
    KafkaClientError,
    ListedOffset,
    NewTopic,
    ProducedBatch,
    broker_kind_from_api_versions,
    parse_bootstrap,
)
from storage.kafka_security import KafkaSecurityConfig

__all__ = ["KafkaClient"]


class KafkaClient:
    """Raw requests to the brokers of one cluster.

    Use as ``async with KafkaClient(...) as client``. Connections open on first use, one per
    broker, and are reopened after a failure on the next request.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tierproxy",
        request_timeout_ms: int = 30_000,
        security: KafkaSecurityConfig | None = None,
    ) -> None:
        """:raises ValueError: for malformed bootstrap servers.
        :raises ConfigError: when the SASL password file cannot be read.
        :raises OSError: when a TLS CA, certificate or key file cannot be read.
        """
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._client_id = client_id
        self._timeout = request_timeout_ms / 1000
        self._login = Login(security or KafkaSecurityConfig())
        self._brokers: dict[int, BrokerAddress] = {}
        self._connections: dict[tuple[str, int], Connection] = {}
        self._opening: dict[tuple[str, int], asyncio.Task[Connection]] = {}
        self._kind: BrokerKind | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection and wait until their sockets are closed."""
        for task in self._opening.values():
            task.cancel()
        connections = list(self._connections.values())
        self._connections.clear()
        self._opening.clear()
        await asyncio.gather(*(connection.aclose() for connection in connections))

    @property
    def broker_kind(self) -> BrokerKind:
        """What the first broker answered as (``"other"`` before any connection)."""
        return self._kind or "other"

    async def detect_broker_kind(self) -> BrokerKind:
        """Connect if needed and tell what kind of broker this is.

        :raises BrokerConnectionError: when no bootstrap server answers.
        """
        await self._bootstrap_connection()
        return self.broker_kind

    async def _connect(self, host: str, port: int) -> Connection:
        key = (host, port)
        connection = self._connections.get(key)
        if connection is not None and not connection.is_closed:
            return connection
        task = self._opening.get(key)
        if task is None:
            task = asyncio.ensure_future(
                Connection.open(host, port, self._client_id, self._timeout, self._login)
            )
            self._opening[key] = task
        try:
            connection = await asyncio.shield(task)
        finally:
            if self._opening.get(key) is task and task.done():
                del self._opening[key]
        self._connections[key] = connection
        if self._kind is None:
            self._kind = broker_kind_from_api_versions(
                connection.versions, connection.feature_epoch
            )
        return connection

    async def _bootstrap_connection(self) -> Connection:
        errors = []
        for host, port in self._bootstrap:
            try:
                return await self._connect(host, port)
            except BrokerConnectionError as err:
                errors.append(str(err))
        raise BrokerConnectionError("no bootstrap server answered: " + "; ".join(errors))

    async def _node(self, node_id: int | None) -> Connection:
        if node_id is None:
            return await self._bootstrap_connection()
        address = self._brokers.get(node_id)
        if address is None:
            await self.metadata(())
            address = self._brokers.get(node_id)
            if address is None:
                raise KafkaClientError(f"broker {node_id} is not in the cluster metadata")
        return await self._connect(address.host, address.port)

    async def api_versions(self, node_id: int | None = None) -> Mapping[int, range]:
        """The API version ranges the broker advertised."""
        return dict((await self._node(node_id)).versions)

    async def speaks(self, api_key: ApiKey, node_id: int | None = None) -> bool:
        """Whether the broker advertised ``api_key`` in a version this client knows."""
        return (await self._node(node_id)).speaks(api_key)

    async def metadata(self, topics: Sequence[str] | None = None) -> ClusterMetadata:
        """Brokers, and the topics named (all topics for ``None``, none for ``()``).

        :raises BrokerConnectionError: when no broker answers.
        """
        cluster, self._brokers = await reads.metadata(await self._bootstrap_connection(), topics)
        return cluster

    async def fetch(
        self,
        node_id: int | None,
        targets: Sequence[FetchTarget],
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 64 * 1024 * 1024,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[FetchedPartition]:
        """Fetch raw record batches from the leader ``node_id`` (sessionless, replica -1).

        :raises BrokerConnectionError: when the broker cannot be reached or times out.
        :raises KafkaClientError: for a top-level error of the whole response.
        """
        return await reads.fetch(
            await self._node(node_id),
            targets,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
        )

    async def list_offsets(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[ListedOffset]:
        """ListOffsets for ``(topic, partition, timestamp)`` targets (-2 earliest, -1 latest).

        Tansu may answer LATEST with the last batch's base offset: use a Fetch's high
        watermark for the log end.
        """
        return await reads.list_offsets(
            await self._node(node_id), targets, isolation_level=isolation_level
        )

    async def produce(
        self,
        node_id: int,
        topic: str,
        partition: int,
        batch: bytes,
        *,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> ProducedBatch:
        """Append one record batch on the partition's leader ``node_id``, with ``acks=all``
        (a transactional batch names its ``transactional_id``).

        :raises BrokerConnectionError: when the leader cannot be reached or times out (the
            batch may or may not have been appended).
        """
        return await writes.produce(
            await self._node(node_id),
            topic,
            partition,
            batch,
            timeout_ms=timeout_ms,
            transactional_id=transactional_id,
        )

    async def init_producer_id(self) -> tuple[KafkaError, int, int]:
        """An idempotent producer's id and epoch: ``(error, producer id, epoch)``."""
        return await writes.init_producer_id(await self._bootstrap_connection())

    async def find_transaction_coordinator(
        self, transactional_id: str
    ) -> transactions.CoordinatorAnswer:
        """The node that coordinates ``transactional_id``'s transactions (asked of any broker)."""
        return await transactions.find_coordinator(
            await self._bootstrap_connection(), transactional_id
        )

    async def init_transactional_producer(
        self, coordinator: int, transactional_id: str, *, transaction_timeout_ms: int
    ) -> transactions.ProducerIdentity:
        """InitProducerId for ``transactional_id`` on its ``coordinator``: a new epoch that
        fences every older holder."""
        return await transactions.init_transactional_producer(
            await self._node(coordinator),
            transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        )

    async def add_partitions_to_txn(
        self,
        coordinator: int,
        transactional_id: str,
        *,
        producer_id: int,
        epoch: int,
        topic: str,
        partitions: Sequence[int],
    ) -> dict[int, KafkaError]:
        """AddPartitionsToTxn on the ``coordinator``: each partition's error."""
        return await transactions.add_partitions_to_txn(
            await self._node(coordinator),
            transactional_id,
            producer_id=producer_id,
            epoch=epoch,
            topic=topic,
            partitions=partitions,
        )

    async def end_txn(
        self, coordinator: int, transactional_id: str, *, producer_id: int, epoch: int, commit: bool
    ) -> KafkaError:
        """EndTxn on the ``coordinator``: commit (or abort) the open transaction."""
        return await transactions.end_txn(
            await self._node(coordinator),
            transactional_id,
            producer_id=producer_id,
            epoch=epoch,
            commit=commit,
        )

    async def describe_transaction(
        self, coordinator: int, transactional_id: str
    ) -> transactions.TransactionDescription:
        """DescribeTransactions on the ``coordinator`` for one transactional id."""
        return await transactions.describe_transaction(
            await self._node(coordinator), transactional_id
        )

    async def delete_records(
        self,
        node_id: int | None,
        targets: Sequence[tuple[str, int, int]],
        *,
        timeout_ms: int = 30_000,
    ) -> list[DeletedRecords]:
        """Move the log start of ``(topic, partition, offset)`` targets forward.

        :raises DeleteRecordsUnsupportedError: unless the broker is Apache Kafka (Tansu drops
            the connection on DeleteRecords).
        """
        connection = await self._node(node_id)
        if self.broker_kind != "kafka":
            raise DeleteRecordsUnsupportedError(
                f"the broker ({self.broker_kind}) does not support DeleteRecords"
            )
        return await writes.delete_records(connection, targets, timeout_ms=timeout_ms)

    async def describe_configs(
        self, topics: Sequence[str]
    ) -> dict[str, dict[str, ConfigEntry] | KafkaError]:
        """Each topic's configs, or the error the broker gave for it.

        Brokers that keep no topic configs (Tansu) answer with an empty mapping.
        """
        if not topics:
            return {}
        connection = await self._bootstrap_connection()
        return await admin.describe_configs(connection, admin.TOPIC_RESOURCE, topics)

    async def describe_broker_configs(self, node_id: int) -> dict[str, ConfigEntry] | KafkaError:
        """The configs of broker ``node_id``, asked of that broker (as Kafka's admin does), or
        the error it answered (CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on the
        cluster)."""
        answer = await admin.describe_configs(
            await self._node(node_id), admin.BROKER_RESOURCE, [str(node_id)]
        )
        return answer.get(str(node_id), KafkaError.UNKNOWN_SERVER_ERROR)

    async def create_topics(
        self, topics: Sequence[NewTopic], *, timeout_ms: int = 30_000
    ) -> list[CreatedTopic]:
        """Create ``topics`` through the controller Metadata names (in KRaft, any broker)."""
        controller = (await self.metadata(())).controller_id
        connection = await self._node(controller if controller >= 0 else None)
        return await admin.create_topics(connection, topics, timeout_ms=timeout_ms)
