"""ApiVersions: pass the broker's answer on, limited to what the proxy can decode.

For every API the proxy intercepts, the advertised range is cut to ``INTERCEPTED_VERSIONS``
so that a client never sends an intercepted API at a version the proxy cannot decode (it
would have to close the connection). Other APIs keep the broker's ranges: they pass
through as raw bytes whatever their version.

An API an interceptor serves above the broker (ListOffsets v8-v9, whose EARLIEST_LOCAL and
LATEST_TIERED the proxy answers itself) is advertised up to that range's end whenever the
broker speaks the range's first version; the router sends such requests at the broker's
version. Each broker's own ranges are recorded, per node, for the router.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from protocol.messages import INTERCEPTED_VERSIONS, ApiKey
from proxy.broker_versions import BrokerVersions
from proxy.interceptors.base import Call, Forward, Interceptor, OnResponse

__all__ = ["ApiVersionsInterceptor", "restrict_api_versions"]

_LIMITS: Final[Mapping[int, range]] = MappingProxyType(
    {int(key): versions for key, versions in INTERCEPTED_VERSIONS.items()}
)


def restrict_api_versions(response: Any, served_above: Mapping[int, range] | None = None) -> Any:
    """Return ``response`` with intercepted APIs cut to the proxy's versions.

    An API whose broker range does not meet the proxy's is left out: the proxy cannot
    carry it. An API in ``served_above`` whose broker range holds that range's first version
    is advertised up to the range's end. Returns the same object when nothing changes.
    """
    entries = []
    changed = False
    for entry in response.api_keys:
        limit = _LIMITS.get(int(entry.api_key))
        if limit is None:
            entries.append(entry)
            continue
        low = max(int(entry.min_version), limit[0])
        high = min(int(entry.max_version), limit[-1])
        above = (served_above or {}).get(int(entry.api_key))
        if above is not None and int(entry.min_version) <= above[0] <= high:
            high = max(high, above[-1])
        if low > high:
            changed = True
            continue
        if (low, high) == (entry.min_version, entry.max_version):
            entries.append(entry)
            continue
        changed = True
        entries.append(dataclasses.replace(entry, min_version=low, max_version=high))
    if not changed:
        return response
    return dataclasses.replace(response, api_keys=tuple(entries))


class ApiVersionsInterceptor(Interceptor):
    """Restricts every ApiVersions response (all versions kio knows), after recording the
    broker's own ranges in ``broker_versions``."""

    def __init__(
        self,
        broker_versions: BrokerVersions | None = None,
        served_above: Mapping[int, range] | None = None,
    ) -> None:
        self._broker_versions = BrokerVersions() if broker_versions is None else broker_versions
        self._served_above = MappingProxyType(dict(served_above or {}))

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.API_VERSIONS: INTERCEPTED_VERSIONS[ApiKey.API_VERSIONS]}

    def on_request(self, call: Call) -> Forward:
        learn = functools.partial(self._restrict, call.connection.node_id)
        return Forward(request=call.request, then=OnResponse(learn))

    async def _restrict(self, node_id: int, response: Any) -> Any:
        self._broker_versions.learn(node_id, response)
        return restrict_api_versions(response, self._served_above)
