"""The API versions each broker speaks, learned from the ApiVersions answers that pass.

The proxy advertises, for a few APIs, versions newer than the broker's (see
:attr:`proxy.interceptors.base.Interceptor.served_above_broker`); to send such a request to
the broker it must know which version the broker takes. Every client asks ApiVersions
before anything else on a connection, so the broker's answer is always here before a
request that needs it; a request on a connection that never asked goes as it is.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BrokerVersions"]


class BrokerVersions:
    """Per broker node id: API key -> the broker's supported version range."""

    __slots__ = ("_nodes",)

    def __init__(self) -> None:
        self._nodes: dict[int, dict[int, range]] = {}

    def learn(self, node_id: int, response: Any) -> None:
        """Record a broker's ApiVersions ``response`` (before the proxy restricts it)."""
        if int(response.error_code) != 0:
            return
        self._nodes[node_id] = {
            int(entry.api_key): range(int(entry.min_version), int(entry.max_version) + 1)
            for entry in response.api_keys
        }

    def supported(self, node_id: int, api_key: int) -> range | None:
        """The versions broker ``node_id`` speaks of ``api_key``; ``None`` when unknown (no
        ApiVersions answer seen yet, or the broker lacks the API)."""
        return self._nodes.get(node_id, {}).get(api_key)
