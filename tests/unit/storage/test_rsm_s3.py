"""storage.rsm.s3 without a server: error sorting, retries, and paths SeaweedFS never takes.

A fake client stands in for aiobotocore (this module only); the real round trips run against
SeaweedFS in tests/integration/storage/test_rsm_s3.py.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import crc32c
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from storage.model import (
    IndexType,
    LogSegmentData,
    TopicIdPartition,
)
from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.s3 import S3RemoteStorage
from storage.rsm.s3_errors import translate_s3_error
from tests.fakes.segments import segment_data, segment_metadata

TOPIC = TopicIdPartition(topic_id=uuid.uuid4(), topic="clicks", partition=0)
MIB = 1024 * 1024


def client_error(status: int, code: str, operation: str = "GetObject") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


@pytest.mark.parametrize(
    ("error", "not_found", "retriable"),
    [
        (client_error(404, "NoSuchKey"), True, False),
        (client_error(404, "404", "HeadObject"), True, False),
        (client_error(404, "NoSuchBucket"), False, False),
        (client_error(403, "AccessDenied"), False, False),
        (client_error(400, "InvalidArgument"), False, False),
        (client_error(500, "InternalError"), False, True),
        (client_error(503, "SlowDown"), False, True),
        (client_error(503, "ServiceUnavailable"), False, True),
        (client_error(429, "TooManyRequests"), False, True),
        (client_error(400, "RequestTimeout"), False, True),
        (client_error(400, "ThrottlingException"), False, True),
        (EndpointConnectionError(endpoint_url="http://s3"), False, True),
        (ConnectTimeoutError(endpoint_url="http://s3"), False, True),
        (ReadTimeoutError(endpoint_url="http://s3"), False, True),
        (ResponseStreamingError(error="reset"), False, True),
        (ConnectionResetError(), False, True),
        (TimeoutError(), False, True),
        (NoCredentialsError(), False, False),
        (ParamValidationError(report="bad"), False, False),
    ],
)
def test_errors_are_sorted_into_not_found_retriable_and_permanent(
    error: Exception, not_found: bool, retriable: bool
) -> None:
    translated = translate_s3_error(error, "read", "s3://b/k")
    assert isinstance(translated, RemoteResourceNotFoundError) is not_found
    assert translated.retriable is retriable
    assert "s3://b/k" in str(translated)


class Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aenter__(self) -> Body:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return self.data


class FakeS3:
    """Records calls; each method answers with its scripted outcomes (an exception or a
    response) in turn, repeating the last one."""

    def __init__(self, **script: list[Any]) -> None:
        self.script = script
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def _answer(self, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, kwargs))
        outcomes = self.script.get(name, [])
        outcome = outcomes.pop(0) if len(outcomes) > 1 else (outcomes[0] if outcomes else {})
        if isinstance(outcome, Exception):
            raise outcome
        return dict(outcome)

    async def get_object(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("get_object", kwargs)

    async def head_object(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("head_object", kwargs)

    async def put_object(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("put_object", kwargs)

    async def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("create_multipart_upload", kwargs)

    async def upload_part(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("upload_part", kwargs)

    async def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("complete_multipart_upload", kwargs)

    async def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("abort_multipart_upload", kwargs)

    async def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("list_objects_v2", kwargs)

    async def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        return await self._answer("delete_objects", kwargs)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def storage_with(client: FakeS3, **settings: Any) -> S3RemoteStorage:
    config = RemoteStorageConfig(
        backend="s3",
        s3_bucket="bucket",
        retry_backoff_ms=1,
        retry_backoff_max_ms=4,
        **settings,
    )
    return S3RemoteStorage(config, client=client)


async def test_transient_failures_are_retried_until_success() -> None:
    client = FakeS3(
        get_object=[
            client_error(503, "SlowDown"),
            EndpointConnectionError(endpoint_url="http://s3"),
            {"Body": Body(b"345"), "ContentRange": "bytes 3-5/10"},
        ]
    )
    storage = storage_with(client)
    assert await storage.fetch_log_segment(segment_metadata(TOPIC), 3, 6) == b"345"
    assert client.names() == ["get_object"] * 3
    assert client.calls[0][1]["Range"] == "bytes=3-5"


async def test_persistent_outage_gives_a_retriable_error_after_max_attempts() -> None:
    client = FakeS3(get_object=[EndpointConnectionError(endpoint_url="http://s3")])
    storage = storage_with(client, retry_max_attempts=3)
    with pytest.raises(RemoteStorageError, match="Could not connect") as caught:
        await storage.fetch_log_segment(segment_metadata(TOPIC), 0)
    assert caught.value.retriable is True
    assert len(client.calls) == 3


async def test_not_found_is_not_retried() -> None:
    client = FakeS3(get_object=[client_error(404, "NoSuchKey")])
    storage = storage_with(client)
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.fetch_log_segment(segment_metadata(TOPIC), 0)
    assert len(client.calls) == 1


async def test_open_ended_range_and_a_server_that_ignores_range() -> None:
    # RFC 9110 lets a server answer 200 with the whole object; we slice it ourselves.
    client = FakeS3(get_object=[{"Body": Body(b"0123456789")}])
    storage = storage_with(client)
    assert await storage.fetch_log_segment(segment_metadata(TOPIC), 4, 7) == b"456"
    assert await storage.fetch_log_segment(segment_metadata(TOPIC), 8) == b"89"
    assert client.calls[1][1]["Range"] == "bytes=8-"


async def test_failed_multipart_upload_is_aborted() -> None:
    client = FakeS3(
        create_multipart_upload=[{"UploadId": "u-1"}],
        upload_part=[{"ETag": '"a"'}, client_error(403, "AccessDenied", "UploadPart")],
    )
    storage = storage_with(client, s3_multipart_threshold_bytes=5 * MIB, s3_part_size_bytes=5 * MIB)
    data = LogSegmentData(
        log=bytes(11 * MIB),
        offset_index=b"",
        time_index=b"",
        transaction_index=b"",
        producer_snapshot=b"",
        leader_epoch_checkpoint=b"",
    )
    with pytest.raises(RemoteStorageError, match="AccessDenied") as caught:
        await storage.copy_log_segment(segment_metadata(TOPIC), data)
    assert caught.value.retriable is False
    aborts = [kwargs for name, kwargs in client.calls if name == "abort_multipart_upload"]
    assert [kwargs["UploadId"] for kwargs in aborts] == ["u-1"]
    assert "complete_multipart_upload" not in client.names()


async def test_multipart_parts_are_numbered_and_completed_in_order() -> None:
    client = FakeS3(create_multipart_upload=[{"UploadId": "u-2"}], upload_part=[{"ETag": '"e"'}])
    storage = storage_with(client, s3_multipart_threshold_bytes=5 * MIB, s3_part_size_bytes=5 * MIB)
    log = bytes(range(256)) * (12 * MIB // 256)
    data = segment_data(log)
    await storage.copy_log_segment(segment_metadata(TOPIC), data)
    parts = [kwargs for name, kwargs in client.calls if name == "upload_part"]
    assert sorted(part["PartNumber"] for part in parts) == [1, 2, 3]
    assert b"".join(p["Body"] for p in sorted(parts, key=lambda p: p["PartNumber"])) == log
    (complete,) = [kwargs for name, kwargs in client.calls if name == "complete_multipart_upload"]
    assert [p["PartNumber"] for p in complete["MultipartUpload"]["Parts"]] == [1, 2, 3]
    assert client.names().count("put_object") == 5


async def test_delete_reports_per_key_failures() -> None:
    client = FakeS3(
        list_objects_v2=[{"Contents": [{"Key": "a.log"}, {"Key": "a.index"}]}],
        delete_objects=[{"Errors": [{"Key": "a.log", "Code": "AccessDenied", "Message": "no"}]}],
    )
    storage = storage_with(client)
    with pytest.raises(RemoteStorageError, match="AccessDenied") as caught:
        await storage.delete_log_segment(segment_metadata(TOPIC))
    assert caught.value.retriable is False


async def test_delete_of_a_segment_without_objects_is_not_found() -> None:
    client = FakeS3(list_objects_v2=[{"KeyCount": 0}])
    storage = storage_with(client)
    with pytest.raises(RemoteResourceNotFoundError):
        await storage.delete_log_segment(segment_metadata(TOPIC))
    assert "delete_objects" not in client.names()


async def test_calls_after_close_fail() -> None:
    storage = storage_with(FakeS3())
    await storage.close()
    with pytest.raises(RemoteStorageError, match="closed"):
        await storage.fetch_index(segment_metadata(TOPIC), IndexType.OFFSET)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, {}),
        ({"s3_sse_algorithm": "AES256"}, {"ServerSideEncryption": "AES256"}),
        ({"s3_sse_algorithm": "aws:kms"}, {"ServerSideEncryption": "aws:kms"}),
        (
            {"s3_sse_algorithm": "aws:kms", "s3_sse_kms_key_id": "alias/tierproxy"},
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/tierproxy"},
        ),
    ],
)
async def test_encryption_goes_on_every_put_and_nowhere_else(
    settings: dict[str, str], expected: dict[str, str]
) -> None:
    """PutObject and CreateMultipartUpload carry it; UploadPart must not (S3 rejects the
    headers there: parts inherit the upload's encryption), nor complete, read or delete."""
    client = FakeS3(
        create_multipart_upload=[{"UploadId": "u-3"}],
        upload_part=[{"ETag": '"e"'}],
        get_object=[{"Body": Body(b"x"), "ContentRange": "bytes 0-0/1"}],
        list_objects_v2=[{"Contents": [{"Key": "a.log"}]}],
    )
    storage = storage_with(
        client, s3_multipart_threshold_bytes=5 * MIB, s3_part_size_bytes=5 * MIB, **settings
    )
    data = segment_data(bytes(6 * MIB))
    metadata = segment_metadata(TOPIC)
    await storage.copy_log_segment(metadata, data)
    await storage.fetch_log_segment(metadata, 0, 1)
    await storage.delete_log_segment(metadata)

    encryption_keys = {"ServerSideEncryption", "SSEKMSKeyId"}
    for name, kwargs in client.calls:
        carried = {key: kwargs[key] for key in encryption_keys & kwargs.keys()}
        if name in ("put_object", "create_multipart_upload"):
            assert carried == expected, name
        else:
            assert carried == {}, name
    assert client.names().count("put_object") == 5
    assert client.names().count("create_multipart_upload") == 1
    assert client.names().count("upload_part") == 2


@pytest.mark.parametrize("endpoint", ["https://127.0.0.1:1", "http://127.0.0.1:1"])
async def test_the_payload_is_never_hashed_into_the_signature_its_crc32c_is_signed(
    endpoint: str,
) -> None:
    """SigV4's SHA-256 of the body costs CPU for every byte uploaded; the body is sent
    UNSIGNED-PAYLOAD, over HTTP too, and its CRC-32C goes in a signed header that the store
    checks. The request is stopped before it is sent (no server)."""
    storage = S3RemoteStorage(
        RemoteStorageConfig(
            backend="s3",
            s3_bucket="segments",
            s3_endpoint=endpoint,
            s3_region="us-east-1",
            s3_access_key_id="key",
            s3_secret_access_key="secret",
            s3_path_style_access=True,
        )
    )
    client: Any = await storage._connected_client()
    seen: dict[str, Any] = {}

    def stop_before_send(request: Any, **_: Any) -> None:
        for name in ("X-Amz-Content-SHA256", "x-amz-checksum-crc32c", "Authorization"):
            value = request.headers[name]
            seen[name] = value.decode() if isinstance(value, bytes) else value
        raise RuntimeError("stopped before sending")

    client.meta.events.register("before-send.s3.UploadPart", stop_before_send)
    with pytest.raises(RuntimeError, match="stopped before sending"):
        await client.upload_part(
            Bucket="segments",
            Key="k",
            UploadId="u",
            PartNumber=1,
            Body=bytearray(b"batch"),
            ChecksumCRC32C=_crc32c(b"batch"),
        )
    await storage.close()
    assert seen["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    assert seen["x-amz-checksum-crc32c"] == _crc32c(b"batch")
    signed = seen["Authorization"].split("SignedHeaders=")[1].split(",")[0]
    assert "x-amz-checksum-crc32c" in signed.split(";")


def _crc32c(data: bytes) -> str:
    return base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()


async def test_every_body_carries_its_crc32c() -> None:
    """Small files in one put, a large one in parts: each body with its own CRC-32C, the
    upload created for CRC-32C and completed with the parts' checksums."""
    client = FakeS3(create_multipart_upload=[{"UploadId": "u-4"}], upload_part=[{"ETag": '"e"'}])
    storage = storage_with(client, s3_multipart_threshold_bytes=5 * MIB, s3_part_size_bytes=5 * MIB)
    await storage.copy_log_segment(
        segment_metadata(TOPIC), segment_data(bytes(range(256)) * 40_000)
    )
    bodies = [kwargs for name, kwargs in client.calls if name in ("put_object", "upload_part")]
    assert len(bodies) == 5 + 2
    for kwargs in bodies:
        assert kwargs["ChecksumCRC32C"] == _crc32c(bytes(kwargs["Body"]))
    (create,) = [kwargs for name, kwargs in client.calls if name == "create_multipart_upload"]
    assert create["ChecksumAlgorithm"] == "CRC32C"
    (complete,) = [kwargs for name, kwargs in client.calls if name == "complete_multipart_upload"]
    parts = {p["PartNumber"]: p for name, p in client.calls if name == "upload_part"}
    assert [
        (p["PartNumber"], p["ChecksumCRC32C"]) for p in complete["MultipartUpload"]["Parts"]
    ] == [(n, parts[n]["ChecksumCRC32C"]) for n in (1, 2)]
