"""One request to an object store, tried again as the retry policy allows.

Every failure leaves as a :class:`~storage.rsm.base.RemoteStorageError`: one already sorted
is kept, any other is sorted by the store's own ``translate``; only a retriable one is tried
again (:func:`storage.rsm.s3_errors.is_retriable`), the retries logged at INFO with back-off
(:class:`storage.retry_log.RetryLog`), and a success after them in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from storage.retry import Clock, RetryPolicy, call_with_retry
from storage.retry_log import RetryLog, log_failure, log_recovery
from storage.rsm.base import RemoteStorageError
from storage.rsm.s3_errors import is_retriable

__all__ = ["Translate", "retried_request"]

T = TypeVar("T")

Translate = Callable[[Exception, str, str], RemoteStorageError]
"""Sorts a failure to ``action`` (second argument) ``where`` (third) into a storage error."""


async def retried_request(
    action: str,
    where: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    translate: Translate,
    policy: RetryPolicy,
    clock: Clock,
    logger: logging.Logger,
) -> T:
    """``attempt()`` with retries; every failure as a :class:`RemoteStorageError`.

    :raises RemoteStorageError: the last attempt's failure, or a retriable one when the
        retry deadline passed.
    """

    async def once() -> T:
        try:
            return await attempt()
        except RemoteStorageError:
            raise
        except Exception as err:
            raise translate(err, action, where) from err

    retries = RetryLog(clock=clock.monotonic)

    def log_retry(attempt_number: int, err: Exception, wait: float) -> None:
        log_failure(
            retries,
            logger,
            "remote.request.retry",
            err,
            lambda err, attempt: f"attempt {attempt} failed ({err}); retrying in {wait:.2f} s",
            level=logging.INFO,
            action=action,
            object=where,
        )

    try:
        answer = await call_with_retry(
            once, policy=policy, is_retriable=is_retriable, clock=clock, on_retry=log_retry
        )
    except TimeoutError as err:
        raise RemoteStorageError(
            f"cannot {action} {where}: no success within the retry deadline of "
            f"{policy.deadline_ms} ms",
            retriable=True,
        ) from err
    log_recovery(retries, logger, "remote.request.recovered", f"{action} {where}", action=action)
    return answer
