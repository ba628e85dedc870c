"""S3 failures sorted into not-found, retriable and permanent :class:`RemoteStorageError`.

One place decides what the retry loop of :mod:`storage.rsm.s3` tries again: connection
failures, timeouts, 5xx and throttling codes are retriable; missing objects become
:class:`RemoteResourceNotFoundError` (a missing bucket does not: that is a configuration
error, not a missing segment); everything else (denied access, bad requests) is permanent.
"""

from __future__ import annotations

import aiohttp
from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

from storage.rsm.base import RemoteResourceNotFoundError, RemoteStorageError

__all__ = ["http_status", "is_retriable", "translate_s3_error"]

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchUpload"})
_THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
    }
)
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    BotoConnectionError,
    HTTPClientError,
    IncompleteReadError,
    aiohttp.ClientError,
    TimeoutError,
    OSError,
)


def http_status(err: ClientError) -> int | None:
    """The HTTP status S3 answered with, if the error carries one."""
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def translate_s3_error(err: Exception, action: str, where: str) -> RemoteStorageError:
    """Sort an S3/HTTP failure into not-found, retriable or permanent; ``where`` is the
    object (``s3://BUCKET/KEY``), which a not-found error names as its ``key``."""
    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code", ""))
        status = http_status(err)
        message = f"cannot {action} {where}: {code or status} {err}"
        if code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket"):
            return RemoteResourceNotFoundError(message, key=where)
        retriable = code in _THROTTLING_CODES or status == 429 or (status or 0) >= 500
        return RemoteStorageError(message, retriable=retriable)
    retriable = isinstance(err, _TRANSIENT_ERRORS)
    return RemoteStorageError(f"cannot {action} {where}: {err!r}", retriable=retriable)


def is_retriable(err: Exception) -> bool:
    """The retry loop's test: only a translated error marked retriable is tried again."""
    return isinstance(err, RemoteStorageError) and err.retriable
