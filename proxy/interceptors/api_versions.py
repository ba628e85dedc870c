"""ApiVersions: pass the broker's answer on, limited to what the proxy can decode.

For every API the proxy intercepts, the advertised range is cut to ``INTERCEPTED_VERSIONS``
so that a client never sends an intercepted API at a version the proxy cannot decode (it
would have to close the connection). Other APIs keep the broker's ranges: they pass
through as raw bytes whatever their version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from protocol.messages import INTERCEPTED_VERSIONS, ApiKey
from proxy.interceptors.base import Call, Interceptor

__all__ = ["ApiVersionsInterceptor", "restrict_api_versions"]

_LIMITS: Final[Mapping[int, range]] = MappingProxyType(
    {int(key): versions for key, versions in INTERCEPTED_VERSIONS.items()}
)


def restrict_api_versions(response: Any) -> Any:
    """Return ``response`` with intercepted APIs cut to the proxy's versions.

    An API whose broker range does not meet the proxy's is left out: the proxy cannot
    carry it. Returns the same object when nothing changes.
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
    """Restricts every ApiVersions response (all versions kio knows)."""

    @property
    def versions(self) -> Mapping[ApiKey, range]:
        return {ApiKey.API_VERSIONS: INTERCEPTED_VERSIONS[ApiKey.API_VERSIONS]}

    async def on_response(self, call: Call, response: Any) -> Any:
        return restrict_api_versions(response)
