"""Remote storage on S3 (or any S3-compatible store: MinIO, SeaweedFS, ...) via aiobotocore.

Every S3 request goes through :func:`storage.rsm.retried.retried_request` with the configured
policy; botocore's own retries are switched off so that one policy, with Kafka's settings,
governs.
Errors are sorted into retriable (connection failures, timeouts, 5xx, throttling) and not
(missing objects, denied access, bad requests) and surface as
:class:`~storage.rsm.base.RemoteStorageError` (:mod:`storage.rsm.s3_errors`).

- Copy: the six files of a segment upload concurrently; a file above the multipart threshold
  is sent in parts, a few at a time, each retried on its own, and the upload is aborted if it
  cannot be completed, so no invisible parts are left to bill. Every body carries its
  CRC-32C (``x-amz-checksum-crc32c``, in the signed headers), which the store checks before
  it keeps the bytes (S3 and SeaweedFS answer ``BadDigest`` otherwise), and the body itself
  is sent ``UNSIGNED-PAYLOAD``: see :func:`_checksum`. The server-side encryption
  settings go on ``PutObject`` and ``CreateMultipartUpload`` only: S3 rejects them on
  ``UploadPart``, whose parts inherit the upload's encryption.
- Ranged read: one ``GET`` with ``Range: bytes=a-b``, read straight into its buffer by
  :mod:`storage.rsm.s3_ranged_get` (a presigned URL from botocore, the body never through
  aiohttp); any answer but the plain 206 goes again through botocore, where S3's 416 for a
  start at or past the end makes a ``HEAD`` learn the size, to tell "empty tail" from
  "beyond the end".
- Delete: a ``LIST`` of the segment's key prefix (which also finds the leftovers of a failed
  copy), then one ``DeleteObjects``; S3 deletes are silent about missing keys, so the listing is
  what tells a missing segment apart.

The client is created on first use (creating one needs the event loop) and holds a pool of at
most ``remote.log.storage.s3.max.connections`` connections; further requests wait for one.
Its credentials are static keys or the AWS credential chain (:mod:`storage.rsm.s3_credentials`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, Protocol, TypeVar

import crc32c
from aiobotocore.config import AioConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)

from storage.config import ConfigError
from storage.log_event import event
from storage.model import IndexType, LogSegmentData, RemoteLogSegmentMetadata
from storage.retry import SYSTEM_CLOCK, Clock
from storage.rsm.base import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    check_range,
    most_severe,
)
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.layout import RemoteLayout
from storage.rsm.retried import retried_request
from storage.rsm.s3_credentials import credentials_source, new_session
from storage.rsm.s3_errors import http_status, translate_s3_error
from storage.rsm.s3_ranged_get import URL_EXPIRY_SECONDS, RangedGets, SignedGet

__all__ = ["S3Client", "S3RemoteStorage"]

T = TypeVar("T")

logger = logging.getLogger(__name__)

_PART_UPLOAD_CONCURRENCY = 4
"""Parts of one object in flight at once: enough to fill a link, while the copies of part
bytes held in memory stay at 4 x part size per large object."""


class S3Client(Protocol):
    """The S3 operations used here, as an aiobotocore S3 client offers them (keyword
    arguments and response dicts as in the S3 API); a seam for fakes in tests."""

    async def get_object(self, **kwargs: Any) -> dict[str, Any]: ...
    async def head_object(self, **kwargs: Any) -> dict[str, Any]: ...
    async def put_object(self, **kwargs: Any) -> dict[str, Any]: ...
    async def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...
    async def upload_part(self, **kwargs: Any) -> dict[str, Any]: ...
    async def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...
    async def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...
    async def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]: ...
    async def delete_objects(self, **kwargs: Any) -> dict[str, Any]: ...


_S3Call = Callable[[S3Client], Awaitable[T]]


class S3RemoteStorage:
    """A :class:`~storage.rsm.base.RemoteStorageManager` over one S3 bucket, and the
    :class:`~storage.rsm.objects.ObjectStore` beneath
    :class:`~storage.rsm.segments.SegmentStorage`.

    :param clock: time source of the retry loop (tests pass a fake one).
    :param client: an S3 client to use instead of creating one from ``config``; its owner
        closes it (:meth:`close` only closes a client created here).
    :raises ConfigError: when ``config`` names no bucket.
    """

    def __init__(
        self,
        config: RemoteStorageConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        client: S3Client | None = None,
    ) -> None:
        if not config.s3_bucket:
            raise ConfigError("remote.log.storage.s3.bucket is required for the s3 backend")
        self._config = config
        self._bucket = config.s3_bucket
        self._layout = RemoteLayout(prefix=config.prefix)
        self._policy = config.retry_policy()
        self._clock = clock
        self._encryption = _encryption_arguments(config)
        self._session = new_session(config)
        self._exit_stack = AsyncExitStack()
        self._client = client
        self._ranged: RangedGets | None = None
        """Lean ranged GETs, with a client created here (an injected one may not presign)."""
        self._client_lock = asyncio.Lock()
        self._closed = False

    @property
    def location(self) -> str:
        """Where the objects live, for logs."""
        prefix = self._layout.prefix.strip("/")
        endpoint = self._config.s3_endpoint or "AWS"
        return f"s3://{self._bucket}/{prefix + '/' if prefix else ''} at {endpoint}"

    @property
    def hint(self) -> str:
        endpoint = self._config.s3_endpoint or "AWS's, from remote.log.storage.s3.region"
        return (
            f"check the endpoint ({endpoint}), that bucket {self._bucket!r} exists, and that "
            "the credentials may list and write it"
        )

    async def check(self) -> None:
        """List at most one key under the prefix: proves the endpoint answers, the bucket
        exists and the credentials may list it, without reading any object.

        :raises RemoteStorageError: when any of that is not so.
        """
        prefix = self._layout.prefix.strip("/")

        async def list_one(client: S3Client) -> None:
            await client.list_objects_v2(Bucket=self._bucket, Prefix=prefix, MaxKeys=1)

        await self._request("list", prefix, list_one)

    async def describe_credentials(self) -> str:
        """Which source the credentials come from (never their values), for the start-up log.

        :raises RemoteStorageError: when there are none; the message names the chain.
        """
        return await credentials_source(self._session, self._config)

    async def copy_log_segment(
        self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData
    ) -> None:
        files = [(self._layout.log_key(metadata), data.log)]
        files += [(self._layout.index_key(metadata, t), data.file_for(t)) for t in IndexType]
        try:
            async with asyncio.TaskGroup() as group:
                for key, content in files:
                    group.create_task(self._put(key, content))
        except ExceptionGroup as errors:
            raise most_severe(errors) from errors

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None = None
    ) -> bytes | bytearray:
        return await self._get_range(self._layout.log_key(metadata), start, end)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        return await self.get_object(self._layout.index_key(metadata, index_type))

    async def delete_log_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        prefix = self._layout.segment_prefix(metadata)
        if not await self.delete_prefix(prefix):
            raise RemoteResourceNotFoundError(f"segment s3://{self._bucket}/{prefix}* not found")

    async def log_segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        """The size of the segment's ``.log`` object, from a HEAD
        (:class:`~storage.rsm.base.SegmentProbe`).

        :raises RemoteResourceNotFoundError: when it does not exist.
        :raises RemoteStorageError: for other storage failures.
        """
        return await self.object_size(self._layout.log_key(metadata))

    # -- objects (storage.rsm.objects.ObjectStore) ------------------------------------------

    async def put_object(self, key: str, body: bytes | memoryview) -> None:
        await self._put(key, body)

    async def get_object(self, key: str) -> bytes:
        async def get(client: S3Client) -> bytes:
            response = await client.get_object(Bucket=self._bucket, Key=key)
            return await _read_body(response)

        return await self._request("read", key, get)

    async def get_object_range(self, key: str, start: int, end: int) -> bytes | bytearray:
        return await self._get_range(key, start, end)

    async def object_size(self, key: str) -> int:
        async def head(client: S3Client) -> int:
            response = await client.head_object(Bucket=self._bucket, Key=key)
            return int(response["ContentLength"])

        return await self._request("stat", key, head)

    async def delete_prefix(self, prefix: str) -> int:
        async def list_keys(client: S3Client) -> list[str]:
            listing = await client.list_objects_v2(Bucket=self._bucket, Prefix=prefix)
            return [entry["Key"] for entry in listing.get("Contents", ())]

        keys = await self._request("list", prefix, list_keys)
        if not keys:
            return 0

        async def delete(client: S3Client) -> None:
            objects = [{"Key": key} for key in keys]
            result = await client.delete_objects(
                Bucket=self._bucket, Delete={"Objects": objects, "Quiet": True}
            )
            if failures := result.get("Errors"):
                failure = failures[0]
                error = ClientError({"Error": failure}, "DeleteObjects")
                where = f"s3://{self._bucket}/{failure.get('Key', prefix)}"
                raise translate_s3_error(error, "delete", where) from error

        await self._request("delete", prefix, delete)
        return len(keys)

    async def _get_range(self, key: str, start: int, end: int | None) -> bytes | bytearray:
        check_range(start, end)
        if end == start:
            return b""
        byte_range = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"

        async def get_range(client: S3Client) -> bytes | bytearray:
            if self._ranged is not None and end is not None:
                data = await self._ranged.get(self._bucket, key, start, end)
                if data is not None:
                    return data
            try:
                response = await client.get_object(Bucket=self._bucket, Key=key, Range=byte_range)
            except ClientError as err:
                if http_status(err) != 416:
                    raise
                # Unsatisfiable: start is at or past the end. Only the size tells which.
                head = await client.head_object(Bucket=self._bucket, Key=key)
                size = int(head["ContentLength"])
                if start == size:
                    return b""
                raise RemoteRangeError(key=key, start=start, size=size) from err
            body = await _read_body(response)
            if "ContentRange" not in response:
                # The server ignored Range (RFC 9110 allows it) and sent the whole object.
                if start > len(body):
                    raise RemoteRangeError(key=key, start=start, size=len(body))
                return body[start:end]
            return body

        return await self._request("read", key, get_range)

    def recycle(self, data: bytes | bytearray) -> None:
        """``data``, an answer of :meth:`fetch_log_segment`, is no longer kept by the caller
        (the chunk cache evicted it): a later GET of its length may read into it
        (:class:`~storage.rsm.s3_ranged_get.SpareBodies`)."""
        if self._ranged is not None and isinstance(data, bytearray):
            self._ranged.recycle(data)

    async def close(self) -> None:
        self._closed = True
        if self._ranged is not None:
            self._ranged.close()
        await self._exit_stack.aclose()

    async def _put(self, key: str, content: bytes | memoryview) -> None:
        if len(content) > self._config.s3_multipart_threshold_bytes:
            await self._put_multipart(key, content)
            return

        body = _body(content)
        checksum = _checksum(body)

        async def put(client: S3Client) -> None:
            await client.put_object(
                Bucket=self._bucket, Key=key, Body=body, ChecksumCRC32C=checksum, **self._encryption
            )

        await self._request("write", key, put)

    async def _put_multipart(self, key: str, content: bytes | memoryview) -> None:
        async def create(client: S3Client) -> str:
            response = await client.create_multipart_upload(
                Bucket=self._bucket, Key=key, ChecksumAlgorithm="CRC32C", **self._encryption
            )
            return str(response["UploadId"])

        upload_id = await self._request("start upload of", key, create)
        try:
            parts = await self._upload_parts(key, upload_id, content)

            async def complete(client: S3Client) -> None:
                await client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )

            await self._request("complete upload of", key, complete)
        except BaseException:
            await self._abort_upload(key, upload_id)
            raise

    async def _upload_parts(
        self, key: str, upload_id: str, content: bytes | memoryview
    ) -> list[dict[str, Any]]:
        part_size = self._config.s3_part_size_bytes
        whole = memoryview(content)
        slots = asyncio.Semaphore(_PART_UPLOAD_CONCURRENCY)

        async def upload(number: int, offset: int) -> dict[str, Any]:
            async with slots:
                body = _body(whole[offset : offset + part_size])
                checksum = _checksum(body)

                async def send(client: S3Client) -> str:
                    response = await client.upload_part(
                        Bucket=self._bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=body,
                        ChecksumCRC32C=checksum,
                    )
                    return str(response["ETag"])

                etag = await self._request(f"upload part {number} of", key, send)
                return {"PartNumber": number, "ETag": etag, "ChecksumCRC32C": checksum}

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(upload(number, offset))
                    for number, offset in enumerate(range(0, len(content), part_size), start=1)
                ]
        except ExceptionGroup as errors:
            raise most_severe(errors) from errors
        return [task.result() for task in tasks]

    async def _abort_upload(self, key: str, upload_id: str) -> None:
        """Best effort: a bucket lifecycle rule is the safety net for uploads we cannot abort."""
        try:
            client = await self._connected_client()
            await client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)
        except Exception as err:
            event(
                logger,
                logging.WARNING,
                "remote.upload.abort_failed",
                msg=f"could not abort multipart upload of s3://{self._bucket}/{key}: {err}",
                bucket=self._bucket,
                key=key,
            )

    async def _request(self, action: str, key: str, call: _S3Call[T]) -> T:
        """Run one S3 request with retries, translating every failure to RemoteStorageError."""
        client = await self._connected_client()
        return await retried_request(
            action,
            f"s3://{self._bucket}/{key}",
            lambda: call(client),
            translate=translate_s3_error,
            policy=self._policy,
            clock=self._clock,
            logger=logger,
        )

    async def _connected_client(self) -> S3Client:
        if self._closed:
            raise RemoteStorageError("S3 remote storage is closed", retriable=False)
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._client is None:
                await self.describe_credentials()  # no client without credentials: see there
                try:
                    client: S3Client = await self._exit_stack.enter_async_context(
                        self._session.create_client("s3", **self._client_arguments())
                    )
                except BotoCoreError as err:  # e.g. AWS_PROFILE names no profile (for the region)
                    raise translate_s3_error(err, "connect to", self.location) from err
                self._client = client
                self._ranged = self._ranged_gets(client)
            return self._client

    def _ranged_gets(self, client: Any) -> RangedGets:
        async def presign(bucket: str, key: str) -> SignedGet:
            url: str = await client.generate_presigned_url(
                "get_object",
                Params={"Bucket": bucket, "Key": key},
                ExpiresIn=URL_EXPIRY_SECONDS,
            )
            return SignedGet(url=url)

        config = self._config
        return RangedGets(
            presign,
            max_connections=config.s3_max_connections,
            connect_timeout=config.s3_connect_timeout_ms / 1000,
            read_timeout=config.s3_read_timeout_ms / 1000,
            ca_file=os.environ.get("AWS_CA_BUNDLE"),
        )

    def _client_arguments(self) -> dict[str, Any]:
        config = self._config
        return {
            "endpoint_url": config.s3_endpoint,
            "region_name": config.s3_region,
            "aws_access_key_id": config.s3_access_key_id,
            "aws_secret_access_key": config.s3_secret_access_key,
            "config": AioConfig(
                max_pool_connections=config.s3_max_connections,
                connect_timeout=config.s3_connect_timeout_ms / 1000,
                read_timeout=config.s3_read_timeout_ms / 1000,
                retries={"total_max_attempts": 1},
                s3={
                    "addressing_style": "path" if config.s3_path_style_access else "auto",
                    # UNSIGNED-PAYLOAD with a CRC-32C header instead (see _checksum).
                    "payload_signing_enabled": False,
                },
                # Checksums only where S3 demands them (the puts give their own CRC-32C):
                # botocore's default CRC32 trailers cost CPU on both sides and trip up some
                # S3-compatible servers.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        }


def _encryption_arguments(config: RemoteStorageConfig) -> dict[str, str]:
    """The server-side encryption parameters of every ``PutObject`` and
    ``CreateMultipartUpload``: none, SSE-S3, or SSE-KMS with an optional key."""
    if config.s3_sse_algorithm == "none":
        return {}
    arguments = {"ServerSideEncryption": config.s3_sse_algorithm}
    if config.s3_sse_kms_key_id:
        arguments["SSEKMSKeyId"] = config.s3_sse_kms_key_id
    return arguments


def _body(content: bytes | memoryview) -> bytearray:
    """The body of a put, in the one form that is sent without further copies.

    botocore refuses a memoryview, and wraps ``bytes`` in a BytesIO, which aiohttp copies whole
    (``getbuffer``) and then again chunk by chunk; a bytearray goes to the socket as it is. So
    one copy here saves two. aiohttp warns about a bytes-like body over 1 MB (a ResourceWarning,
    silent by default) that writing it at once "might lock the event loop": the transport sends
    what the socket takes and keeps the rest, which is far less than the copies and per-64-KiB
    loop turns a BytesIO would cost.
    """
    return bytearray(content)


def _checksum(body: bytearray) -> str:
    """The body's CRC-32C as ``x-amz-checksum-crc32c`` carries it (base64 of 4 bytes).

    SigV4 would otherwise hash every byte uploaded over plain HTTP with SHA-256, several times
    the CPU of the C CRC-32C (``docs/decisions/0010-pipeline-copies-and-memory.md``). With the
    CRC in a signed header and the payload unsigned, the store still refuses a body that changed
    on the way (``BadDigest``, checked by S3 and by SeaweedFS before they keep it). What a CRC
    does not give is SHA-256's resistance to a body forged on purpose by someone on the path, so
    an untrusted network needs HTTPS (where AWS SDKs send ``UNSIGNED-PAYLOAD`` too).
    """
    return base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode("ascii")


async def _read_body(response: dict[str, Any]) -> bytes:
    async with response["Body"] as body:
        return bytes(await body.read())
