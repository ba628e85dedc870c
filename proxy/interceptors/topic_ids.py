"""Each topic's current id, learned from the Metadata responses passing through.

A Fetch below v13 names topics, not ids. If a topic was deleted and created again under the
same name, the remote tier may still hold the old topic's segments; the read path must never
serve them to the new topic (see :mod:`proxy.remote.topic_ids`). Metadata v10+ answers carry
each topic's id, which the proxy remembers; for an older Metadata request, which shows no
ids, the proxy looks the names up itself at once.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

from protocol.messages import INTERCEPTED_VERSIONS, ApiKey, Body
from protocol.metadata_bodies import FIRST_TOPIC_ID_VERSION, read_metadata_topics
from proxy.interceptors.base import Call, Forward, Interceptor, OnResponse

__all__ = ["MetadataTopicIds", "TopicIdObserver"]


class TopicIdObserver(Protocol):
    """What learns the topic ids (:class:`proxy.remote.topic_ids.TopicIds`)."""

    def observe(self, name: str, topic_id: uuid.UUID) -> None: ...

    def want(self, names: Iterable[str]) -> None: ...


class MetadataTopicIds(Interceptor):
    """Passes every Metadata v10+ topic id to the observer; changes nothing."""

    def __init__(self, observer: TopicIdObserver) -> None:
        self._observer = observer

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.METADATA: INTERCEPTED_VERSIONS[ApiKey.METADATA]}

    @property
    def needs_request(self) -> bool:
        return False

    def on_request(self, call: Call) -> Forward:
        learn = functools.partial(self._learn, call.header.api_version)
        return Forward(request=call.request, then=OnResponse(learn))

    async def _learn(self, version: int, response: Body) -> Body:
        topics = read_metadata_topics(response, version)
        if version < FIRST_TOPIC_ID_VERSION:
            self._observer.want(topic.name for topic in topics if topic.name)
            return response
        for topic in topics:
            if topic.name and topic.topic_id is not None:
                self._observer.observe(topic.name, topic.topic_id)
        return response
