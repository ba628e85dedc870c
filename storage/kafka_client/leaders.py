"""Where each partition of one topic is led, as the producer and consumer need to know.

Produce and Fetch must go to a partition's leader. Leaders move (a broker restarts, an
election), and the broker then answers NOT_LEADER_OR_FOLLOWER or the connection fails; Kafka's
clients then refresh their metadata and try again after a back-off, and so does everything
here: :meth:`PartitionLeaders.forget` after such an error, and the next lookup asks Metadata.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.errors import KafkaError
from storage.kafka_client.client import KafkaClient
from storage.kafka_client.values import BrokerConnectionError, KafkaClientError

__all__ = [
    "LeaderNotAvailableError",
    "PartitionLeaders",
    "TopicAuthorizationError",
    "is_retriable",
]


class LeaderNotAvailableError(KafkaClientError):
    """A partition has no leader the client knows of yet; retrying after a back-off helps."""


class TopicAuthorizationError(KafkaClientError):
    """The broker answered TOPIC_AUTHORIZATION_FAILED: no retry helps until an ACL is added.

    ``request`` is Kafka's name of the refused request (``Produce``, ``Fetch``, ...), which
    says which ACL is missing (:func:`storage.kafka_acls.denied`).
    """

    def __init__(self, request: str, topic: str) -> None:
        super().__init__(f"{request} on topic {topic!r} answered TOPIC_AUTHORIZATION_FAILED")
        self.request = request
        self.topic = topic


def is_retriable(error: Exception) -> bool:
    """Whether a refreshed leader and a back-off may make the request succeed."""
    return isinstance(error, BrokerConnectionError | LeaderNotAvailableError)


class PartitionLeaders:
    """The leader of each partition of ``topic``, from Metadata, refreshed when forgotten."""

    def __init__(self, client: KafkaClient, topic: str) -> None:
        self._client = client
        self._topic = topic
        self._leaders: dict[int, int] = {}

    async def leader(self, partition: int) -> int:
        """The node id of ``partition``'s leader.

        :raises LeaderNotAvailableError: when Metadata names none (yet).
        :raises TopicAuthorizationError: when the principal may not describe the topic.
        :raises BrokerConnectionError: when no broker answers.
        """
        if partition not in self._leaders:
            await self.refresh()
        leader = self._leaders.get(partition)
        if leader is None:
            raise LeaderNotAvailableError(f"{self._topic}-{partition} has no leader yet")
        return leader

    async def by_leader(self, partitions: Iterable[int]) -> dict[int, list[int]]:
        """``partitions`` grouped by leader; those without a known leader are left out (the
        caller tries them again after a back-off)."""
        wanted = list(partitions)
        if any(p not in self._leaders for p in wanted):
            await self.refresh()
        grouped: dict[int, list[int]] = {}
        for partition in wanted:
            leader = self._leaders.get(partition)
            if leader is not None:
                grouped.setdefault(leader, []).append(partition)
        return grouped

    def forget(self, partitions: Iterable[int] | None = None) -> None:
        """Ask Metadata again before the next request to ``partitions`` (all for ``None``)."""
        if partitions is None:
            self._leaders.clear()
            return
        for partition in partitions:
            self._leaders.pop(partition, None)

    async def refresh(self) -> None:
        """Read the topic's leaders from Metadata."""
        cluster = await self._client.metadata([self._topic])
        topic = cluster.topics.get(self._topic)
        if topic is not None and topic.error == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise TopicAuthorizationError("Metadata", self._topic)
        if topic is None or topic.error != KafkaError.NONE:
            self._leaders.clear()  # not created yet, or between elections: retried
            return
        self._leaders = {
            p.partition: p.leader_id
            for p in topic.partitions
            if p.error == KafkaError.NONE and p.leader_id >= 0
        }
