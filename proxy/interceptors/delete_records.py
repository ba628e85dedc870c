"""DeleteRecords over the whole log: an operator's deletion reaches the remote tier too.

Kafka with tiered storage moves the log's ``logStartOffset`` on DeleteRecords, never serves
an offset below it again (remote or local), and its remote log manager deletes the remote
segments that lie wholly below it. An unmodified broker only knows its local log: asked to
delete below its own log start it does nothing, and above it it forgets only local data,
while the remote tier would go on serving every deleted record. So for a tiered partition
the proxy, after the broker accepted the request:

- records the new whole-log start in the metadata topic (a ``RemoteLogStartOffsetRecord``):
  this proxy stops serving below it as soon as the record is written, every other proxy
  once it has read it, and the tiering pipeline deletes the segments wholly below it;
- answers ``low_watermark`` = the whole log's new start, as Kafka does.

The broker checks the request first (ACLs, leadership, an offset above the high watermark):
a partition it refuses keeps the broker's error and nothing is recorded. A deletion sent
to the broker directly, not through a proxy, deletes only the broker's local copy. The
tiering pipeline's own DeleteRecords (its client id, ``tiering.client.id``) drop only local
copies of tiered data, so they pass through untouched, should the pipeline ever be pointed
at the proxy.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Mapping
from typing import Final

from protocol.errors import KafkaError
from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, Body
from protocol.offset_bodies import (
    Deleted,
    DeleteRecordsEditor,
    PartitionName,
    read_delete_records_request,
)
from proxy.interceptors.base import Call, Forward, Interceptor, OnResponse
from proxy.logs import event
from proxy.remote.broker_view import BrokerView
from proxy.remote.fetch_plan import RemotePartitions
from proxy.remote.tier import MetadataPublisher
from storage.model import TopicIdPartition
from storage.rlmm.records import log_start_record

__all__ = ["DeleteRecordsInterceptor"]

_log = logging.getLogger("tierproxy.delete_records")

_HIGH_WATERMARK: Final = -1
"""DeleteRecords' "up to the high watermark" offset."""
_PARTITION_BYTES: Final = 200
"""About what one tiered partition holds in a DeleteRecords exchange."""
_STORAGE_ERROR: Final = int(KafkaError.KAFKA_STORAGE_ERROR)

_Tiered = dict[PartitionName, tuple[TopicIdPartition, int]]
"""The tiered partitions a DeleteRecords names, with the offset asked for each."""


class DeleteRecordsInterceptor(Interceptor):
    """Extends DeleteRecords of tiered partitions to the remote tier; see the module."""

    def __init__(
        self,
        *,
        partitions: RemotePartitions,
        broker_view: BrokerView,
        publish: MetadataPublisher,
        pipeline_client_id: str,
    ) -> None:
        """:param pipeline_client_id: the tiering pipeline's client id, whose DeleteRecords
        drop only local copies of tiered data and pass untouched."""
        self._partitions = partitions
        self._broker = broker_view
        self._publish = publish
        self._pipeline_client_id = pipeline_client_id

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.DELETE_RECORDS: INTERCEPTED_VERSIONS[ApiKey.DELETE_RECORDS]}

    @property
    def needs_request(self) -> bool:
        return True

    def on_request(self, call: Call) -> Forward:
        if call.header.client_id == self._pipeline_client_id:
            return Forward(request=call.request)
        tiered: _Tiered = {
            asked.name: (tp, asked.offset)
            for asked in read_delete_records_request(call.body)
            if (
                tp := self._partitions.partition(
                    topic=asked.name[0], topic_id=None, partition=asked.name[1]
                )
            )
            is not None
        }
        if not tiered:
            return Forward(request=call.request)
        respond = functools.partial(self._on_response, tiered)
        held = _PARTITION_BYTES * len(tiered)
        return Forward(request=call.request, then=OnResponse(respond, held_bytes=held))

    async def _on_response(self, tiered: _Tiered, response: Body) -> Body:
        editor = DeleteRecordsEditor(response)
        for part in editor.partitions():
            found = tiered.get(part.name)
            if found is not None and part.error == KafkaError.NONE:
                editor.put(await self._extend(found[0], found[1], part))
        return editor.body()

    async def _extend(self, tp: TopicIdPartition, asked: int, part: Deleted) -> Deleted:
        """Record the deletion for the remote tier; the partition's answer."""
        target = part.low_watermark if asked == _HIGH_WATERMARK else asked
        remote = self._partitions.remote_range(tp)
        if remote is None or self._broker.state(tp).reaches(remote) is False:
            return part  # nothing of the remote tier is served: the broker's answer stands
        if target <= remote.start:
            return dataclasses.replace(part, low_watermark=remote.start)  # nothing deleted
        try:
            await self._publish(log_start_record(tp, target, int(time.time() * 1000)))
        except Exception as err:  # the metadata topic is out of reach: the client retries
            event(
                _log,
                logging.WARNING,
                "delete_records.remote_failed",
                topic=tp.topic,
                partition=tp.partition,
                offset=target,
                error=repr(err),
            )
            return dataclasses.replace(part, error=_STORAGE_ERROR, low_watermark=-1)
        event(
            _log,
            logging.INFO,
            "delete_records.remote",
            topic=tp.topic,
            partition=tp.partition,
            log_start=target,
        )
        return dataclasses.replace(part, low_watermark=target)
