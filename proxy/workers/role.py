"""What makes a proxy process one worker of several."""

from __future__ import annotations

import dataclasses
from typing import Final

__all__ = ["EXIT_BAD_SETTINGS", "EXIT_NOT_INITIALISED", "WorkerRole"]

EXIT_BAD_SETTINGS: Final = 2
"""A worker's exit code for settings or an address that cannot work (as ``serve``'s)."""
EXIT_NOT_INITIALISED: Final = 75
"""A worker's exit code (EX_TEMPFAIL) when the metadata topic was not read within
``remote.log.metadata.initialization.timeout.ms``; the supervisor then exits 1, as ``serve``
does. Distinct from 1, which is what an unhandled exception exits with."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRole:
    """One worker of a supervised ``serve``: its listeners bind with ``SO_REUSEPORT`` and its
    endpoint (``/metrics``, ``/livez``, ``/readyz``) is served on ``endpoint`` (a Unix socket)
    for the supervisor, not on ``metrics.port``."""

    index: int
    count: int
    endpoint: str
