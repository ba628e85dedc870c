"""Each topic's current id, learned from Metadata responses (v10+).

A Fetch below v13 names topics, not ids. If a topic was deleted and created again under the
same name, the remote tier may still hold the old topic's segments; the read path must never
serve them to the new topic. Metadata v10+ answers carry each topic's id, which the proxy
remembers so that :meth:`~proxy.remote.tier.RemoteTier.partition` can refuse a name whose
tiered id is not the current one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final, Protocol

from protocol.messages import INTERCEPTED_VERSIONS, ApiKey
from proxy.interceptors.base import Call, Interceptor

__all__ = ["MetadataTopicIds", "TopicIdObserver"]

_FIRST_TOPIC_ID_VERSION: Final = 10


class TopicIdObserver(Protocol):
    """What learns the topic ids (``RemoteTier``)."""

    def observe_topic(self, name: str, topic_id: uuid.UUID) -> None: ...


class MetadataTopicIds(Interceptor):
    """Passes every Metadata v10+ topic id to the observer; changes nothing."""

    def __init__(self, observer: TopicIdObserver) -> None:
        self._observer = observer

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        versions = INTERCEPTED_VERSIONS[ApiKey.METADATA]
        return {ApiKey.METADATA: range(_FIRST_TOPIC_ID_VERSION, versions[-1] + 1)}

    @property
    def needs_request(self) -> bool:
        return False

    def wants_response(self, call: Call, body: memoryview) -> bool:
        return True

    async def on_response(self, call: Call, response: Any) -> Any:
        for topic in response.topics:
            if topic.name and topic.topic_id is not None and topic.topic_id.int:
                self._observer.observe_topic(topic.name, topic.topic_id)
        return response
