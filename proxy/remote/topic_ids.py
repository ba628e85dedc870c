"""The current topic id of each tiered topic's name, so a re-created topic never gets the
tiered data of its deleted namesake.

A Fetch below v13 (and every ListOffsets and OffsetForLeaderEpoch) names a topic, not its id.
When a topic is deleted and created again under the same name, the remote tier may still
hold the old topic's segments until the pipeline has processed the deletion (and the
metadata cache then skips ids marked deleted). Before that, the proxy must know which id the
name means now. It learns it from:

- Metadata v10+ answers passing through (every modern client asks before it fetches);
- its own Metadata requests to the broker: for every tiered topic name at start and then
  every ``refresh_seconds``, and at once for the names of an older Metadata request passing
  through (a client that will fetch by name without showing the proxy the ids).

Until the first answer, a name is served by the newest id the metadata topic knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from cachetools import LRUCache

from storage.retry_log import RetryLog, log_failure, log_recovery

__all__ = ["TopicIdLookup", "TopicIds"]

_log = logging.getLogger("tierproxy.topic_ids")

_NAMES_KEPT: Final = 100_000
"""Topic names whose current id the proxy remembers (a few MB)."""

TopicIdLookup = Callable[[list[str]], Awaitable[dict[str, uuid.UUID]]]
"""Asks the broker for the current ids of some topic names (absent: no such topic)."""


class TopicIds:
    """Each name's current topic id, kept fresh; see the module docstring."""

    def __init__(
        self,
        *,
        lookup: TopicIdLookup | None,
        tiered_names: Callable[[], Iterable[str]],
        refresh_seconds: float = 30.0,
    ) -> None:
        self._ids: LRUCache[str, uuid.UUID] = LRUCache(_NAMES_KEPT)
        self._lookup = lookup
        self._tiered_names = tiered_names
        self._refresh_seconds = refresh_seconds
        self._wanted: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = RetryLog()

    def observe(self, name: str, topic_id: uuid.UUID) -> None:
        """The broker said ``topic_id`` is ``name``'s current id."""
        self._ids[name] = topic_id

    def current(self, name: str) -> uuid.UUID | None:
        """``name``'s current id, if known."""
        return self._ids.get(name)

    def want(self, names: Iterable[str]) -> None:
        """Look these names up soon (a client asked about them without showing ids)."""
        self._wanted.update(names)
        self._wake.set()

    def start(self) -> None:
        """Start the refresh task (needs the running event loop; idempotent)."""
        if self._lookup is not None and self._task is None:
            self._task = asyncio.create_task(self._refresh(), name="topic-id-refresh")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _refresh(self) -> None:
        assert self._lookup is not None
        while True:
            names = sorted({*self._tiered_names(), *self._wanted})
            self._wanted.clear()
            self._wake.clear()
            if names:
                try:
                    found = await self._lookup(names)
                except Exception as err:  # the broker is away: the next round tries again
                    log_failure(
                        self._failures,
                        _log,
                        "topic_ids.retry",
                        err,
                        lambda err, attempt: (
                            f"cannot look up topic ids ({err}); retrying (attempt {attempt})"
                        ),
                    )
                else:
                    log_recovery(self._failures, _log, "topic_ids.reconnected", "topic id lookup")
                    for name, topic_id in found.items():
                        self.observe(name, topic_id)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._refresh_seconds):
                    await self._wake.wait()
