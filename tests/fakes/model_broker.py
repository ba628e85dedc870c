"""A fake broker's model of partitions, for the read-path interceptor tests (not Kafka).

:class:`ModelBroker` plugs into :class:`~tests.fakes.wire_broker.WireBroker` as its script
and answers Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords from a small model of
partitions whose *local* log starts at ``local_start`` (everything below was "deleted after
tiering"), the way Apache Kafka without tiered storage answers: OFFSET_OUT_OF_RANGE with
unknown high watermark, last stable offset and log start below the local log; whole batches
from the one holding the fetch offset, at least one for the first partition with data, cut
mid-batch at the byte limits otherwise; incremental fetch sessions that answer only
partitions with records or errors. Every decoded request is recorded so tests can check what
the proxy forwarded.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import KafkaError
from protocol.headers import RequestHeader
from protocol.indexes.leader_epoch_checkpoint import (
    EpochEntry,
    end_offset_for_epoch,
    epoch_for_offset,
    truncate_from_start,
)
from protocol.messages import (
    ApiKey,
    ErrorCode,
    build,
    decode_request,
    nested_class,
    response_class,
)
from protocol.records import parse_batch_header
from tests.fakes.kafka_responses import partition_answers, response_payload
from tests.fakes.record_batches import record_timestamps


def err(code: KafkaError) -> ErrorCode:
    return ErrorCode(int(code))


@dataclass
class ModelPartition:
    """One partition of the model: the whole log's batches and where the local log starts."""

    batches: list[bytes]
    local_start: int = 0
    lineage: tuple[EpochEntry, ...] = (EpochEntry(epoch=0, start_offset=0),)
    error: KafkaError = KafkaError.NONE
    """An error to answer every request for this partition with (leadership, ACLs, ...)."""

    @property
    def high_watermark(self) -> int:
        return parse_batch_header(self.batches[-1]).next_offset if self.batches else 0

    def read(self, offset: int, max_bytes: int, min_one: bool) -> bytes:
        out = b""
        for batch in self.batches:
            header = parse_batch_header(batch)
            if header.last_offset < offset or header.base_offset < self.local_start:
                continue
            if len(out) + len(batch) > max_bytes:
                if not out and min_one:
                    return batch
                return out + batch[: max(0, max_bytes - len(out))]
            out += batch
        return out


@dataclass
class ModelBroker:
    """Answers the read path's requests from :class:`ModelPartition` objects."""

    partitions: dict[tuple[str, int], ModelPartition]
    topic_ids: dict[str, uuid.UUID]
    requests: list[tuple[int, int, Any]] = field(default_factory=list)
    sessions: dict[int, dict[tuple[str, int], tuple[int, int]]] = field(default_factory=dict)
    session_epochs: dict[int, int] = field(default_factory=dict)
    """The epoch each session expects next (Kafka's ``FetchSession.epoch``)."""
    delay: float = 0.0
    throttle_ms: int = 0
    """The throttle time every Fetch answer carries (the broker's own quota)."""
    garble_fetches: bool = False
    """Answer Fetch with a body no decoder accepts (its correlation id stays right)."""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def fetches(self) -> list[Any]:
        return [body for key, _v, body in self.requests if key == ApiKey.FETCH]

    async def script(self, header: RequestHeader, body: bytes) -> bytes | None:
        request = decode_request(header.api_key, header.api_version, body)
        self.requests.append((header.api_key, header.api_version, request))
        if self.delay:
            await asyncio.sleep(self.delay)
        if header.api_key == ApiKey.FETCH:
            payload = response_payload(header, self._fetch(header.api_version, request))
            if self.garble_fetches:  # cut inside the body: the header still matches
                return payload[: len(payload) - 7]
            return payload
        if header.api_key == ApiKey.LIST_OFFSETS:
            return response_payload(header, self._list_offsets(header.api_version, request))
        if header.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return response_payload(header, self._epochs(header.api_version, request))
        if header.api_key == ApiKey.DELETE_RECORDS:
            return response_payload(header, self._delete_records(header.api_version, request))
        raise AssertionError(f"unexpected API {header.api_key}")

    # -- Fetch ---------------------------------------------------------------------------

    def _name(self, topic: Any, version: int) -> str:
        if version >= 13:
            names = {v: k for k, v in self.topic_ids.items()}
            return names[topic.topic_id]
        return str(topic.topic)

    def _fetch(self, version: int, request: Any) -> Any:
        wanted: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in request.topics:
            for part in topic.partitions:
                wanted[(self._name(topic, version), part.partition)] = (
                    part.fetch_offset,
                    part.partition_max_bytes,
                )
        session_id, incremental = 0, False
        if version >= 7 and request.session_epoch == 0:
            session_id = next(self._ids)
            self.sessions[session_id] = dict(wanted)
            self.session_epochs[session_id] = 1
        elif version >= 7 and request.session_id and request.session_epoch > 0:
            session = self.sessions.get(request.session_id)
            refusal = self._session_refusal(request.session_id, request.session_epoch)
            if session is None or refusal is not None:
                return _session_error(version, refusal or KafkaError.FETCH_SESSION_ID_NOT_FOUND)
            for topic in request.forgotten_topics_data:
                for partition in topic.partitions:
                    session.pop((self._name(topic, version), partition), None)
            session.update(wanted)
            wanted = dict(session)
            session_id, incremental = request.session_id, True
        body_class = response_class(ApiKey.FETCH, version)
        topic_class = nested_class(body_class, "responses")
        partition_class = nested_class(topic_class, "partitions")
        budget = request.max_bytes
        grouped: dict[str, list[Any]] = {}
        min_one = True
        for (name, index), (offset, max_bytes) in wanted.items():
            model = self.partitions[(name, index)]
            entry = self._partition(model, offset, min(max_bytes, max(budget, 0)), min_one)
            records = entry["records"]
            budget -= len(records)
            min_one = min_one and not records
            if incremental and not records and entry["error_code"] == err(KafkaError.NONE):
                continue
            grouped.setdefault(name, []).append(
                build(partition_class, partition_index=index, aborted_transactions=None, **entry)
            )
        return build(
            body_class,
            throttle_time=datetime.timedelta(milliseconds=self.throttle_ms),
            error_code=err(KafkaError.NONE),
            session_id=session_id,
            responses=tuple(
                build(
                    topic_class,
                    topic=name,
                    topic_id=self.topic_ids.get(name),
                    partitions=tuple(parts),
                )
                for name, parts in grouped.items()
            ),
        )

    def _session_refusal(self, session_id: int, epoch: int) -> KafkaError | None:
        """Kafka's check of an incremental request's session and epoch; the epoch steps on
        if they hold."""
        expected = self.session_epochs.get(session_id)
        if expected is None:
            return KafkaError.FETCH_SESSION_ID_NOT_FOUND
        if epoch != expected:
            return KafkaError.INVALID_FETCH_SESSION_EPOCH
        self.session_epochs[session_id] = 1 if expected == 2**31 - 1 else expected + 1
        return None

    @staticmethod
    def _partition(
        model: ModelPartition, offset: int, max_bytes: int, min_one: bool
    ) -> dict[str, Any]:
        code: KafkaError = model.error
        if code != KafkaError.NONE:
            hw, lso, start, records = -1, -1, -1, b""
        elif offset < model.local_start or offset > model.high_watermark:
            code, hw, lso, start, records = KafkaError.OFFSET_OUT_OF_RANGE, -1, -1, -1, b""
        else:
            code, hw = KafkaError.NONE, model.high_watermark
            lso, start = hw, model.local_start
            records = model.read(offset, max_bytes, min_one)
        return {
            "error_code": err(code),
            "high_watermark": hw,
            "last_stable_offset": lso,
            "log_start_offset": start,
            "records": records,
        }

    # -- ListOffsets, DeleteRecords and OffsetForLeaderEpoch -------------------------------

    def _of_model(
        self,
        answer: Callable[[ModelPartition, Any], dict[str, Any]],
        partition_field: str = "partition_index",
    ) -> Callable[[str, Any], dict[str, Any]]:
        """``answer`` for the model of the partition a request names."""
        return lambda topic, part: answer(
            self.partitions[(topic, getattr(part, partition_field))], part
        )

    def _list_offsets(self, version: int, request: Any) -> Any:
        return partition_answers(
            ApiKey.LIST_OFFSETS, version, request, self._of_model(self._list_offset)
        )

    def _list_offset(self, model: ModelPartition, part: Any) -> dict[str, Any]:
        code, timestamp, offset = KafkaError.NONE, -1, -1
        if model.error != KafkaError.NONE:
            code = model.error
        elif part.timestamp == -1:
            offset = model.high_watermark
        elif part.timestamp == -2:
            offset = model.local_start
        elif part.timestamp < 0:
            code = KafkaError.INVALID_REQUEST  # a broker that knows no other sentinel
        else:
            timestamp, offset = self._by_time(model, part.timestamp)
        epoch = epoch_for_offset(model.lineage, offset)
        return {
            "error_code": err(code),
            "timestamp": timestamp,
            "offset": offset,
            "leader_epoch": -1 if epoch is None else epoch,
        }

    @staticmethod
    def _by_time(model: ModelPartition, target: int) -> tuple[int, int]:
        for batch in model.batches:
            header = parse_batch_header(batch)
            if header.base_offset < model.local_start:
                continue
            for offset, timestamp in record_timestamps([batch]):
                if timestamp >= target:
                    return timestamp, offset
        return -1, -1

    def _delete_records(self, version: int, request: Any) -> Any:
        return partition_answers(
            ApiKey.DELETE_RECORDS, version, request, self._of_model(self._delete_below)
        )

    @staticmethod
    def _delete_below(model: ModelPartition, part: Any) -> dict[str, Any]:
        """Kafka's ``deleteRecordsOnLocalLog``: -1 means the high watermark, an offset past
        it is out of range, and the log start only moves up."""
        offset = model.high_watermark if part.offset == -1 else part.offset
        code, low = KafkaError.NONE, -1
        if model.error != KafkaError.NONE:
            code = model.error
        elif offset > model.high_watermark:
            code = KafkaError.OFFSET_OUT_OF_RANGE
        else:
            model.local_start = max(model.local_start, offset)
            low = model.local_start
        return {"low_watermark": low, "error_code": err(code)}

    def _epochs(self, version: int, request: Any) -> Any:
        return partition_answers(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            request,
            self._of_model(self._epoch_end, "partition"),
            topic_field="topic",
            partition_field="partition",
        )

    @staticmethod
    def _epoch_end(model: ModelPartition, part: Any) -> dict[str, Any]:
        """Where ``part``'s leader epoch ends in the local log's lineage: Kafka's after the
        log start moved up (the epochs that began before it collapse into one that begins
        at it)."""
        local = truncate_from_start(model.lineage, model.local_start)
        epoch, end = end_offset_for_epoch(local, part.leader_epoch, model.high_watermark)
        return {"error_code": err(model.error), "leader_epoch": epoch, "end_offset": end}


def _session_error(version: int, error: KafkaError) -> Any:
    return build(
        response_class(ApiKey.FETCH, version),
        throttle_time=datetime.timedelta(0),
        error_code=err(error),
        session_id=0,
        responses=(),
    )
