"""What the REST object stores (Google Cloud Storage, Azure Blob Storage) share: one aiohttp
session, one retry policy, one way of sorting failures, and the lean ranged GET.

Their data path is plain HTTP against each service's REST API, not their SDKs
(``docs/decisions/0003-object-store-clients.md`` has the figures): writes, listings and
deletes through aiohttp; ranged reads straight into their buffer by
:class:`~storage.rsm.s3_ranged_get.RangedGets` (the S3 path's lean GET, which takes a signed
URL and headers), falling back to aiohttp for any answer but a plain 206. Credentials come
from each SDK's standard chain (:mod:`storage.rsm.gcs_auth`, :mod:`storage.rsm.azure_auth`).

Failures: connection errors, timeouts, 408, 429 and 5xx are retriable; 404 for an object is
:class:`~storage.rsm.base.RemoteResourceNotFoundError` (a missing bucket or container is a
configuration error, not a missing segment); everything else (401, 403, 400...) is
permanent. Every request goes through :func:`storage.rsm.retried.retried_request` with
the configured policy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import aiohttp

from storage.retry import SYSTEM_CLOCK, Clock, RetryPolicy
from storage.rsm.base import (
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    check_range,
    most_severe,
)
from storage.rsm.retried import retried_request
from storage.rsm.s3_ranged_get import Presign, RangedGets

__all__ = [
    "MAX_CONNECTIONS",
    "HttpFailure",
    "HttpObjects",
    "range_answer",
    "translate_http_error",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)

MAX_CONNECTIONS: Final = 32
"""Connections kept to the endpoint (as S3's default ``max.connections``)."""
CONNECT_TIMEOUT_SECONDS: Final = 5.0
READ_TIMEOUT_SECONDS: Final = 30.0
"""Time allowed to connect, and between bytes of an answer (as S3's defaults)."""
_RETRIABLE_STATUSES: Final = frozenset({408, 429})
_DELETES_AT_ONCE: Final = 8


class HttpFailure(Exception):
    """An answer that was not a success: its status, the service's error code, its text,
    and whether the bucket or container itself is missing (not the object)."""

    def __init__(
        self, *, status: int, code: str, text: str, container_missing: bool = False
    ) -> None:
        super().__init__(f"{status} {code}")
        self.status = status
        self.code = code
        self.text = text
        self.container_missing = container_missing


def translate_http_error(err: Exception, action: str, where: str) -> RemoteStorageError:
    """Sort a failure of a request to ``where`` into not-found, retriable or permanent."""
    if isinstance(err, RemoteStorageError):
        return err
    if isinstance(err, HttpFailure):
        message = f"cannot {action} {where}: {err.status} {err.code} {err.text[:300]}".rstrip()
        if err.status == 404 and not err.container_missing:
            return RemoteResourceNotFoundError(message, key=where)
        retriable = err.status in _RETRIABLE_STATUSES or err.status >= 500
        return RemoteStorageError(message, retriable=retriable)
    retriable = isinstance(err, aiohttp.ClientError | OSError | TimeoutError)
    return RemoteStorageError(f"cannot {action} {where}: {err!r}", retriable=retriable)


class HttpObjects:
    """An aiohttp session, created on first use, with retries and the lean ranged GETs."""

    def __init__(
        self,
        *,
        scheme: str,
        policy: RetryPolicy,
        presign: Presign,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """:param scheme: how object names are shown in messages (``gs``, ``azure``).
        :param presign: the signed GET of an object, for the lean ranged GETs."""
        self._scheme = scheme
        self._policy = policy
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self.ranged = RangedGets(
            presign,
            max_connections=MAX_CONNECTIONS,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            store=scheme,
        )

    def session(self) -> aiohttp.ClientSession:
        """The session (created now if this is the first request).

        :raises RemoteStorageError: after :meth:`close`.
        """
        if self._closed:
            raise RemoteStorageError(f"{self._scheme} remote storage is closed", retriable=False)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
                timeout=aiohttp.ClientTimeout(
                    sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=READ_TIMEOUT_SECONDS
                ),
                auto_decompress=False,
            )
        return self._session

    async def call(self, action: str, where: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` with retries; every failure as a :class:`RemoteStorageError`.

        :raises RemoteStorageError: the last attempt's failure, or a retriable one when the
            retry deadline passed.
        """
        return await retried_request(
            action,
            where,
            attempt,
            translate=translate_http_error,
            policy=self._policy,
            clock=self._clock,
            logger=_log,
        )

    async def get_range(
        self,
        container: str,
        key: str,
        start: int,
        end: int,
        *,
        where: str,
        fallback: Callable[[str], Awaitable[bytes | bytearray]],
    ) -> bytes | bytearray:
        """Bytes ``start`` to ``end`` (exclusive) of ``key``, with retries: read in place by
        the lean ranged GET, or, for any answer but a plain 206, by ``fallback`` given the
        ``Range`` header's value (which reads its answer with :func:`range_answer`).

        :raises RemoteStorageError: as :meth:`call`; :class:`RemoteRangeError` for a start
            beyond the object's size.
        """
        check_range(start, end)
        if end == start:
            return b""

        async def get() -> bytes | bytearray:
            data = await self.ranged.get(container, key, start, end)
            if data is not None:
                return data
            return await fallback(f"bytes={start}-{end - 1}")

        return await self.call("read", where, get)

    async def delete_each(
        self, keys: list[str], where: Callable[[str], str], delete: Callable[[str], Awaitable[None]]
    ) -> int:
        """``delete(key)`` for every key, each with retries, a few at a time; the count.

        :raises RemoteStorageError: the first delete that failed for good.
        """
        slots = asyncio.Semaphore(_DELETES_AT_ONCE)

        async def delete_one(key: str) -> None:
            async with slots:
                await self.call("delete", where(key), lambda: delete(key))

        try:
            async with asyncio.TaskGroup() as group:
                for key in keys:
                    group.create_task(delete_one(key))
        except ExceptionGroup as errors:
            raise most_severe(errors) from errors
        return len(keys)

    def recycle(self, data: bytes | bytearray) -> None:
        """An answer of a ranged GET, no longer kept: later answers may be read into it."""
        if isinstance(data, bytearray):
            self.ranged.recycle(data)

    async def close(self) -> None:
        self._closed = True
        self.ranged.close()
        if self._session is not None:
            await self._session.close()
            # aiohttp closes its transports on the next loop turns.
            await asyncio.sleep(0)


async def range_answer(
    answer: aiohttp.ClientResponse,
    *,
    key: str,
    start: int,
    end: int,
    succeeded: Callable[[aiohttp.ClientResponse], Awaitable[None]],
    size: Callable[[], Awaitable[int]],
) -> bytes | bytearray:
    """The bytes ``start`` to ``end`` of a ranged GET's answer: 416 is an empty tail when
    ``start`` is the object's ``size()`` and a :class:`RemoteRangeError` beyond it; a 200
    (the whole object: the range ignored) is cut to the range; any other failure is raised
    by ``succeeded``."""
    if answer.status == 416:
        whole = await size()
        if start == whole:
            return b""
        raise RemoteRangeError(key=key, start=start, size=whole)
    await succeeded(answer)
    body = await answer.read()
    if answer.status == 200:
        if start > len(body):
            raise RemoteRangeError(key=key, start=start, size=len(body))
        return body[start:end]
    return body
